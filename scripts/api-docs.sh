#!/usr/bin/env bash
# The resolver's API reference, generated from its docstrings by pdoc (the test extra installs
# it): one HTML page for the package's root and one per public submodule (those the root's
# `__all__` names), each module's `__all__` being its public API.
#   bash scripts/api-docs.sh [OUTPUT_DIR]     (default: build/api, which git ignores)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-build/api}"
PYTHON="${PYTHON:-python3}"
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m pdoc resolver -o "$OUT"
echo "API reference written to $OUT/index.html"
