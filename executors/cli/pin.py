"""`mesh pin DIR [--refresh [ARTIFACT]]`: record what each upstream tag points at, by digest.

Asks each artifact's registry what its tag points at now (a manifest HEAD; nothing is pulled)
and records "repository:tag" → digest in the ledger. A tag already pinned is not asked about
again unless --refresh names it (or names nothing: every tag), so pins never move by themselves.
After a refresh it lists every container the moved pins change. Exit codes: 0 every tag pinned,
1 some tag could not be resolved (each printed as file:line:col; the others are still recorded),
2 bad input.
"""

from __future__ import annotations

import sys

from executors.control.loading import load_mesh_dir, mesh_lock, write_ledger
from executors.control.registry import RegistryClient, RegistryError
from resolver import MeshError
from resolver._artifacts import (
    artifacts_changed_by_pins,
    catalogue_artifacts,
    containers_using,
    pin_key,
    pin_requests,
    split_repository,
    used_artifacts,
    with_pins,
)

EVERYTHING = "*"


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "pin",
        help="resolve each upstream artifact's tag to a digest and record it in the ledger",
        description="For every artifact named by repository and tag, ask its registry what the "
        "tag points at (nothing is pulled) and record the digest in the ledger. Existing pins "
        "never change unless --refresh names them.",
    )
    parser.add_argument("directory", nargs="?", default=".", metavar="DIR",
                        help="the mesh directory holding mesh.yaml (default: .)")
    parser.add_argument("--refresh", nargs="?", const=EVERYTHING, metavar="ARTIFACT",
                        help="ask again about pinned tags: all of them, or one ARTIFACT "
                        "(module/artifact or repository:tag)")
    parser.add_argument("--all", action="store_true",
                        help="pin every artifact of the catalogue, not only those the mesh runs")
    parser.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                        help="per-request timeout (default 10)")
    parser.set_defaults(func=run)


def run(args, out=None, client: RegistryClient | None = None) -> int:
    out = out or sys.stdout
    inputs = load_mesh_dir(args.directory)
    catalogue, ledger, sources = inputs.catalogue, inputs.ledger, inputs.sources
    every = catalogue_artifacts(catalogue)
    wanted = sorted(every) if args.all else sorted(used_artifacts(catalogue, inputs.mesh))
    refresh = None
    if args.refresh is not None:
        known = set(every) | {pin_key(a) for a in every.values() if pin_key(a)}
        if args.refresh != EVERYTHING and args.refresh not in known:
            raise MeshError(f"--refresh {args.refresh}: no such artifact; expected module/artifact or "
                            f"repository:tag of the catalogue")
        refresh = (args.refresh,)
        if args.refresh != EVERYTHING:  # refreshing one artifact pins it even if the mesh runs none
            wanted = sorted(set(wanted) | {k for k, a in every.items() if args.refresh in (k, pin_key(a))})
    requests_ = pin_requests(catalogue, ledger, wanted, refresh)
    if not requests_:
        print(f"nothing to pin: every tag of {len(wanted)} artifacts is pinned "
              "(--refresh asks the registries again)", file=out)
        return 0

    client = client or RegistryClient(timeout=(args.timeout, args.timeout))
    digests: dict[str, str] = {}
    unreachable: dict[str, str] = {}  # registry → the tag it failed for; a registry that did not answer is not asked again
    failures = 0
    for request in requests_:
        registry = split_repository(request.repository)[0]
        print(f"→ {request.key}: asking {registry}", file=out, flush=True)
        try:
            if registry in unreachable:
                raise RegistryError("unreachable", f"not asked: {registry} did not answer for "
                                    f"{unreachable[registry]} (above)")
            digest = client.resolve(request.repository, request.tag)
        except RegistryError as error:
            if error.kind == "unreachable" and registry not in unreachable:
                unreachable[registry] = request.key
            failures += 1
            for name in request.artifacts:
                module, artifact = name.split("/", 1)
                file, line, col = sources.where(f"module:{module}", "artifacts", artifact, "tag")
                print(f"{file}:{line}:{col}: artifact {artifact} ({request.key}): {error}", file=out, flush=True)
            continue
        before = ledger.pins.get(request.key)
        digests[request.key] = digest
        if before is None:
            print(f"  pinned {request.key} → {digest}", file=out, flush=True)
        elif before == digest:
            print(f"  unchanged {request.key} = {digest}", file=out, flush=True)
        else:
            print(f"  refreshed {request.key}: {before} → {digest}", file=out, flush=True)

    updated = with_pins(ledger, digests)
    if updated != ledger:
        with mesh_lock(args.directory):  # the registries were asked outside the lock: merge
            now = load_mesh_dir(args.directory).ledger  # into the ledger as it is now
            write_ledger(inputs.ledger_path, with_pins(now, digests))
        print(f"ledger written: {inputs.ledger_path}", file=out)
    moved = [k for k in artifacts_changed_by_pins(catalogue, ledger, updated) if ledger.pins.get(pin_key(every[k]))]
    if moved:
        changed = containers_using(catalogue, inputs.mesh, moved)
        print(f"{len(changed)} container{'s' if len(changed) != 1 else ''} change because pins moved "
              f"({', '.join(moved)}):", file=out)
        for container in changed:
            print(f"  {container}", file=out)
    if failures:
        print(f"{failures} tag{'s' if failures != 1 else ''} could not be pinned", file=out)
        return 1
    return 0
