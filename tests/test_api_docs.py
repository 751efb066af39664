"""`bash scripts/api-docs.sh DIR` generates the resolver's API reference from its docstrings: a
page for the root and one for each public submodule, every name of each `__all__` on it."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import ModuleType

import resolver

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
    for submodule in [n for n in resolver.__all__ if isinstance(getattr(resolver, n), ModuleType)]:
        sub_page = (out / "resolver" / f"{submodule}.html").read_text()
        for name in getattr(resolver, submodule).__all__:
            assert f'id="{name}"' in sub_page, f"resolver.{submodule}.{name} is not documented"
        assert 'href="_' not in sub_page
    assert sorted(p.name for p in (out / "resolver").glob("*.html")) == sorted(
        f"{n}.html" for n in resolver.__all__ if isinstance(getattr(resolver, n), ModuleType))
