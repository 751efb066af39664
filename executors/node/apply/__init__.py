"""`mesh apply` on a node: render → observe → diff (pure) → execute → provision → record.

Kept free of imports (see executors/node/__init__.py)."""
