"""`mesh mirror DIR [--registry HOST:PORT]`: copy pinned images into the mesh's own registry.

Registry to registry over the HTTP API, by digest: manifests (an index and every manifest it
lists) and blobs move as exact bytes, so the digest at the mesh's registry is the pinned one;
no Docker Engine is needed. Each copied digest is recorded in the ledger (`mirrored`: digest →
registry address), which is what lets declarations name the mesh's registry (self-hosting).
Artifacts marked `mirror: false` and built artifacts are not copied. The target is the mesh's
artifact-store instance unless --registry names one. Exit codes: 0 everything is mirrored,
1 something could not be (printed as file:line:col; the rest is still recorded), 2 bad input.
"""

from __future__ import annotations

import sys

import attrs

from executors.control.loading import load_mesh_dir, mesh_lock, write_ledger
from executors.control.registry import RegistryClient, RegistryError
from resolver import MeshError
from resolver._artifacts import (
    artifact_state,
    artifact_store_address,
    catalogue_artifacts,
    pin_key,
    used_artifacts,
)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "mirror",
        help="copy every pinned image into the mesh's own registry, by digest",
        description="Copy each pinned upstream image the mesh runs into the mesh's registry "
        "(its artifact-store instance, or --registry) at the same digest, and record it in the "
        "ledger. Nothing goes through a Docker Engine.",
    )
    parser.add_argument("directory", nargs="?", default=".", metavar="DIR",
                        help="the mesh directory holding mesh.yaml (default: .)")
    parser.add_argument("--registry", metavar="HOST:PORT",
                        help="the registry to copy into (default: the mesh's artifact-store instance)")
    parser.add_argument("--all", action="store_true",
                        help="mirror every pinned artifact of the catalogue, not only those the mesh runs")
    parser.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                        help="per-request timeout (default 30)")
    parser.set_defaults(func=run)


def run(args, out=None, client: RegistryClient | None = None) -> int:
    out = out or sys.stdout
    inputs = load_mesh_dir(args.directory)
    catalogue, mesh, ledger, sources = inputs.catalogue, inputs.mesh, inputs.ledger, inputs.sources
    target = args.registry or artifact_store_address(catalogue, mesh, ledger)
    if target is None:
        raise MeshError("the mesh has no registry to mirror into: assign one instance of a module "
                        "providing artifact-store (with its port in the ledger), or pass --registry HOST:PORT")
    every = catalogue_artifacts(catalogue)
    wanted = sorted(every) if args.all else sorted(used_artifacts(catalogue, mesh))
    client = client or RegistryClient(timeout=(args.timeout, args.timeout))
    print(f"mirroring into {target}", file=out, flush=True)
    client.ping(target)

    mirrored = dict(ledger.mirrored)
    done: set[str] = set()
    failures = 0
    for name in wanted:
        artifact = every[name]
        key = pin_key(artifact)
        module, artifact_name = name.split("/", 1)
        if key is None or not artifact.mirror:
            why = "built artifact: pushed by its build" if key is None else "mirror: false"
            print(f"  skip {name}: {why}", file=out)
            continue
        digest = ledger.pins.get(key)
        if digest is None:
            failures += 1
            file, line, col = sources.where(f"module:{module}", "artifacts", artifact_name, "tag")
            print(f"{file}:{line}:{col}: artifact {artifact_name} ({key}) is not pinned; run `mesh pin` first",
                  file=out, flush=True)
            continue
        if (artifact.repository, digest) in done:
            continue
        print(f"→ {name}: {artifact.repository}@{digest}", file=out, flush=True)
        try:
            path = client.copy_image(artifact.repository, digest, target,
                                     progress=lambda line: print(line, file=out, flush=True))
        except RegistryError as error:
            failures += 1
            file, line, col = sources.where(f"module:{module}", "artifacts", artifact_name, "repository")
            print(f"{file}:{line}:{col}: artifact {artifact_name} ({key}): {error}", file=out, flush=True)
            continue
        done.add((artifact.repository, digest))
        mirrored[digest] = target
        print(f"  {target}/{path}@{digest}: held", file=out, flush=True)

    updated = attrs.evolve(ledger, mirrored=ledger.mirrored.update(mirrored))
    if updated != ledger:
        with mesh_lock(args.directory):  # copied outside the lock: merge into the ledger as it is
            now = load_mesh_dir(args.directory).ledger
            write_ledger(inputs.ledger_path,
                         attrs.evolve(now, mirrored=now.mirrored.update(mirrored)))
        print(f"ledger written: {inputs.ledger_path}", file=out)
    registry_of_mesh = artifact_store_address(catalogue, mesh, updated)
    state = artifact_state(catalogue, mesh, updated, registry_of_mesh)
    print(f"artifacts: {state}" + ("" if registry_of_mesh == target else
                                   f" (the mesh's own registry is {registry_of_mesh or 'not assigned'}, "
                                   f"not {target})"), file=out)
    if failures:
        print(f"{failures} artifact{'s' if failures != 1 else ''} could not be mirrored", file=out)
        return 1
    return 0

