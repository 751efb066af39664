"""`mesh graph DIR`: a picture of the mesh (nodes, instances, bindings, refusals, firewall).

Thin on purpose: load and resolve as `mesh plan` does, take the DOT text from the pure
`resolver.picture.mesh_dot` (node and instance order as mesh.yaml writes them), and only for
`svg` or `png` hand it to the Graphviz `dot` program through the `graphviz` binding. Output
goes to stdout or, with `--out`, atomically to a file. Exit codes: 0 no refusal, 1 refusals (the
picture is drawn all the same), 2 bad input or no Graphviz.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional

import resolver
from resolver import Fault, InputError, MeshError

from executors.cli._verb import Subparsers
from executors.cli.extras import install_command
from executors.cli.terminal import to_null
from executors.common.atomic import write_atomic
from executors.common.runtime import now_iso, resolving
from executors.control.loading import load_mesh_dir

FORMATS = ("dot", "svg", "png")
SUFFIXES = {".dot": "dot", ".gv": "dot", ".svg": "svg", ".png": "png"}


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "graph",
        help="draw the mesh: nodes, instances, bindings, refusals, firewall (Graphviz)",
        description="Resolve the mesh in DIR and draw it: each node a box labelled with its "
        "address, its firewall floors, exposures and allows; its instances inside (refused and "
        "held ones in red with the refusal's code); each binding an arrow from consumer to "
        "provider labelled with the provision and how the provider was chosen (dashed blue "
        "across nodes); pending credentials and rotations marked; every problem as a note. "
        "DOT text needs nothing else; svg and png run Graphviz's `dot`. Exit 0 with no "
        "refusal, 1 with refusals, 2 for bad input or a missing Graphviz.",
    )
    parser.add_argument("directory", metavar="DIR", help="the mesh directory holding mesh.yaml")
    parser.add_argument("--node", action="append", metavar="N",
                        help="only this node, and the instances its bindings reach (repeatable)")
    parser.add_argument("--format", choices=FORMATS,
                        help="dot (the text, no Graphviz needed), svg or png; default: from "
                        "--out's suffix (.dot/.gv, .svg, .png), else dot")
    parser.add_argument("--out", metavar="FILE",
                        help="write the picture to FILE (atomically) instead of stdout")
    parser.add_argument("--now", metavar="ISO8601", help=argparse.SUPPRESS)  # tests pin the clock
    parser.set_defaults(func=run)


def output_format(args: argparse.Namespace) -> str:
    given: Optional[str] = args.format
    out: Optional[str] = args.out
    if given:
        return given
    if out:
        for suffix, fmt in SUFFIXES.items():
            if out.lower().endswith(suffix):
                return fmt
    return "dot"


def run(args: argparse.Namespace) -> int:
    fmt = output_format(args)
    directory: str = args.directory
    now: Optional[str] = args.now
    nodes: Optional[list[str]] = args.node
    out: Optional[str] = args.out
    inputs = load_mesh_dir(directory)
    with resolving():
        resolution = resolver.resolve_inputs(inputs, now=now or now_iso())
    if nodes:
        unknown = [n for n in nodes if n not in inputs.mesh.nodes]
        if unknown:
            raise InputError([Fault("--node", 0, 0, f"no node named {n!r} in the mesh",
                                    "one of " + ", ".join(sorted(inputs.mesh.nodes)))
                              for n in unknown])
    text = resolver.picture.mesh_dot(resolution, inputs.mesh,
                                     node_order=inputs.sources.key_order("mesh", "nodes"),
                                     instance_order=inputs.sources.key_order("mesh", "instances"),
                                     nodes=nodes)
    data = text.encode("utf-8") if fmt == "dot" else render(text, fmt)
    if out:
        write_atomic(out, data)
        print(f"{fmt} written: {out}", file=sys.stderr)
    else:
        write_stdout(data, binary=fmt == "png")
    return 1 if resolution.refused else 0


def write_stdout(data: bytes, *, binary: bool) -> None:
    """The bytes as they are (UTF-8 text whatever the terminal's encoding); a png never to a
    terminal. A stdout without bytes (a test's capture) takes the text."""
    buffer = getattr(sys.stdout, "buffer", None)
    if binary and (buffer is None or sys.stdout.isatty()):
        raise MeshError("a png is not for a terminal: give --out FILE or redirect stdout")
    if buffer is None:
        sys.stdout.write(data.decode("utf-8"))
        return
    sys.stdout.flush()
    try:
        buffer.write(data)
        buffer.flush()
    except BrokenPipeError:  # the reader went away (`| head`): the picture ends there
        to_null(buffer)


def render(text: str, fmt: str) -> bytes:
    """The picture laid out by Graphviz's `dot`, as `fmt` (svg or png)."""
    try:  # here, not at the top: the control extra brings it, and DOT text needs none of it
        import graphviz
    except ImportError:
        raise MeshError("the Python package `graphviz` is not installed; it comes with the "
                        f"`control` extra: {install_command('control')}; `--format dot` needs "
                        "neither it nor Graphviz") from None
    try:
        picture: bytes = graphviz.pipe("dot", fmt, text.encode("utf-8"), quiet=True)
        return picture
    except graphviz.ExecutableNotFound:
        raise MeshError("Graphviz's `dot` program is not installed (Debian: apt-get install "
                        "graphviz); `--format dot` prints the text without it") from None
    except graphviz.CalledProcessError as exc:
        detail = (exc.stderr or b"").decode("utf-8", "replace").strip()
        raise MeshError(f"dot could not lay out the picture: {detail or exc}") from None
