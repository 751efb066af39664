"""The node's firewall: an intent rendered to one nftables transaction, read back, applied.

Kept free of imports (see executors/node/__init__.py)."""
