"""What every test here shares when the suite runs in several worker processes (pytest-xdist).

- The host's Docker Engine is shared: `_docker.engine()` takes a shared lock for the test; a
  test marked `engine_alone` holds it alone (tests/_locks.py), and every lock is given back
  when its test ends.
"""

from __future__ import annotations

import pytest

import _locks


@pytest.fixture(autouse=True)
def _engine_lock(request):
    if request.node.get_closest_marker("engine_alone") is not None:
        with _locks.engine_alone():
            yield
    else:
        yield
        _locks.release_engine()
