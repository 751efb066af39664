#!/usr/bin/env bash
# Whole test run: services, project install, pytest. Used by .ci/run.
#   bash scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
RUN_T0=$SECONDS

echo "[test] bringing up services (scripts/services.sh)"
bash scripts/services.sh

# Service coordinates for the tests (KEY=value lines, no secrets).
set -a
# shellcheck disable=SC1091
. /var/lib/mesh-test/env
set +a

if [ -f pyproject.toml ]; then
    echo "[test] $PYTHON -m pip install -e '.[node,control,test]'"
    "$PYTHON" -m pip install -q --disable-pip-version-check -e '.[node,control,test]'
else
    echo "[test] no pyproject.toml: skipping pip install"
fi

if [ "${CI:-}" = true ]; then export HYPOTHESIS_PROFILE=ci; fi

targets=()
for d in tests property_tests; do [ -e "$d" ] && targets+=("$d"); done
[ ${#targets[@]} -gt 0 ] || { echo "[test] ERROR: neither tests/ nor property_tests/ exists" >&2; exit 1; }

# Parallel workers (pytest-xdist), one test file per worker at a time (module fixtures such as
# a fleet of namespaces are built once), the longest files first (conftest.py). Most tests wait
# on daemons and containers, so more workers than the machine's two cores pay.
# MESH_TEST_WORKERS=0 runs the suite in this one process.
workers=${MESH_TEST_WORKERS:-4}
parallel=()
[ "$workers" = 0 ] || parallel=(-n "$workers" --dist loadfile --no-loadscope-reorder)
echo "[test] $PYTHON -m pytest ${parallel[*]} ${targets[*]} $*"
set +e
"$PYTHON" -m pytest "${parallel[@]}" "${targets[@]}" "$@"
rc=$?
set -e
echo "[test] whole run (services, install, tests): $((SECONDS - RUN_T0)) s, pytest exit $rc"
if [ $rc -eq 5 ]; then
    echo "[test] ERROR: pytest collected no tests (exit 5): treating as failure" >&2
    exit 1
fi
exit $rc
