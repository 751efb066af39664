"""Moves that carry their data (`state-from:`): the source serves (serve.py), the target
fetches, verifies and puts in place (arrive.py), over channel.py, the stream in payload.py.

Kept free of imports (see executors/node/__init__.py)."""
