"""`bash scripts/api-docs.sh DIR` generates the resolver's API reference from its docstrings."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_api_docs_are_generated_for_the_public_api(tmp_path):
    out = tmp_path / "api"
    result = subprocess.run(["bash", str(ROOT / "scripts" / "api-docs.sh"), str(out)],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    page = (out / "resolver.html").read_text()
    for name in ("resolve", "container_changes", "MeshError", "ProblemCode", "Resolution"):
        assert f'id="{name}"' in page, f"{name} is not documented"
    assert "resolver/_resolve" not in page and 'href="resolver/_' not in page
