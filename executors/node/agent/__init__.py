"""The node agent: enrolment, its configuration, the loop that takes declarations off the broker.

Kept free of imports (see executors/node/__init__.py)."""
