"""`mesh verify`: is each binding of a node's declaration true, seen from its consumer?

Kept free of imports (see executors/node/__init__.py)."""
