"""`mesh schema [DOCUMENT]`: print the JSON Schema of a document type, or list the types."""

from __future__ import annotations

import json
import sys

from resolver import MeshError, document_names, json_schema


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "schema",
        help="print the JSON Schema of a document (module, provisions, mesh, ledger, declaration)",
        description="Without DOCUMENT, list the document types; with one, print its JSON Schema "
        "(draft 2020-12). The human reference is docs/schema.md.",
    )
    parser.add_argument("document", nargs="?", metavar="DOCUMENT",
                        help="one of: " + ", ".join(document_names()))
    parser.set_defaults(func=run)


def run(args, out=None) -> int:
    out = out or sys.stdout
    if args.document is None:
        for name in document_names():
            print(name, file=out)
        return 0
    if args.document not in document_names():
        raise MeshError(f"no document type {args.document!r}; expected one of "
                        + ", ".join(document_names()))
    print(json.dumps(json_schema(args.document), indent=2), file=out)
    return 0
