#!/bin/sh
# Stage this project into the control module's build context: a wheel of the repository
# (`pip wheel --no-deps`) in catalogue/control/image/dist/, the only way the project gets into
# the image (a build context cannot reach outside itself). Run it before building the image,
# by hand (`docker build catalogue/control/image`) or by a builder using the Docker Engine API
# with the module's declared context (`build: ./image`). dist/ is never committed.
#
#   sh scripts/stage-control-image.sh [CONTEXT]    # default: catalogue/control/image
set -eu
repo=$(cd "$(dirname "$0")/.." && pwd)
context=${1:-"$repo/catalogue/control/image"}
[ -f "$context/Dockerfile" ] || { echo "stage-control-image: $context/Dockerfile: no such file; expected the control module's build context" >&2; exit 2; }
# Two stagings at once would share the repository's setuptools build directory: one at a time
# (a lock on this script's own file, released when the script ends, however it ends).
exec 9<"$0"
flock 9
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
python3 -m pip wheel --quiet --no-deps --disable-pip-version-check --wheel-dir "$staging" "$repo"
rm -rf "$context/dist"
mkdir -p "$context/dist"
mv "$staging"/*.whl "$context/dist/"
echo "staged $(cd "$context/dist" && ls *.whl) into $context/dist/"
