"""`mesh build DIR [MODULE/ARTIFACT…] [--stale]`: build artifacts with a `build:` context.

Through the Docker Engine API (`--docker-host`, default $DOCKER_HOST or the local socket):
each base pulled by its pinned or recorded digest and passed as BASE_IMAGE / BASE_<NAME>, the
result pushed to the mesh's registry by digest (the engine trusts the mesh CA through
/etc/docker/certs.d, as `mesh apply` declares it; the push account is opened with `--key`, the
control node's key) and recorded in the ledger (`builds`: the result's digest and its bases').
`--stale` builds exactly what `mesh stale` lists, foundation first. `--local` builds into this
machine's Engine with no registry (genesis: the mesh's registry does not run yet) and records
each build by its image ID, marked local; with no artifact named it builds every built artifact
the mesh runs that is stale. Without `--local`, every local build is first pushed to the mesh's
registry and its record moved to the registry's digest (the self-hosting transition); with no
artifact named and no `--stale`, that push is all it does. Every step is printed as it
happens. Exit codes: 0 everything built, 1 something could not be (the rest is recorded),
2 bad input.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, TextIO

from resolver import MeshError

from executors.cli._verb import Subparsers
from executors.control.building import build, local_builds
from executors.control.loading import load_mesh_dir
from executors.control.trust import push_auth
from executors.node.docker_engine import connect


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "build",
        help="build artifacts with a build: context and push them to the mesh's registry "
        "(--local: keep them in this machine's Docker Engine)",
        description="Build the named artifacts (module/artifact), or with --stale exactly "
        "those `mesh stale` lists, foundation first: bases pulled by digest (unless the Engine "
        "holds them), the result pushed to the mesh's registry by digest and recorded in the "
        "ledger with its bases' digests. --local (genesis, before the mesh's registry runs) "
        "keeps the result in this Engine, recorded by its image ID; nodes run it from this "
        "Engine and never pull it. Without --local, builds made with --local are pushed to "
        "the mesh's registry first and recorded at its digest.",
    )
    parser.add_argument("directory", metavar="DIR", help="the mesh directory holding mesh.yaml")
    parser.add_argument("artifacts", nargs="*", metavar="MODULE/ARTIFACT",
                        help="the built artifacts to build")
    parser.add_argument("--stale", action="store_true",
                        help="build every artifact `mesh stale` lists (with the named ones)")
    parser.add_argument("--local", action="store_true",
                        help="build into this machine's Docker Engine with no registry, "
                        "recorded by image ID (genesis); with no MODULE/ARTIFACT, every built "
                        "artifact the mesh runs that is stale. The next build without --local "
                        "pushes these to the mesh's registry")
    parser.add_argument("--key", metavar="FILE",
                        help="the control node's private key: opens the registry's push account")
    parser.add_argument("--docker-host", default=os.environ.get("DOCKER_HOST"),
                        help="Docker Engine address (default: $DOCKER_HOST or the local socket)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    out = out or sys.stdout
    artifacts: list[str] = args.artifacts
    stale: bool = args.stale
    local: bool = args.local
    directory: str = args.directory
    key: Optional[str] = args.key
    docker_host: Optional[str] = args.docker_host
    inputs = load_mesh_dir(directory)
    if not artifacts and not stale and not local and not local_builds(inputs.ledger):
        raise MeshError("name the artifacts to build (module/artifact), or pass --stale "
                        "(or --local, before the mesh's registry runs)")
    auth = None if local else next(iter(push_auth(inputs, key).values()), None)
    done = build(inputs, artifacts, stale=stale, local=local, api=connect(docker_host),
                 auth=auth, say=lambda line: print(line, file=out, flush=True))
    print(f"built {len(done.built)}" + (f"; {len(done.failed)} could not be built: "
                                        f"{', '.join(done.failed)}" if done.failed else ""),
          file=out)
    return 1 if done.failed else 0
