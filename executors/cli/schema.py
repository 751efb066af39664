"""`mesh schema [DOCUMENT]`: print the JSON Schema of a document type, or list the types.

The mesh's own documents (module, provisions, mesh, ledger, declaration) are the resolver's;
what travels over the broker (the signed envelope, a declaration message's body, a report, an
enrolment request and answer) is executors/common/message_schemas.py's.
"""

from __future__ import annotations

import json
import sys

from resolver import MeshError, document_names, json_schema


def _message_schemas() -> dict:
    from executors.common.message_schemas import SCHEMAS

    return SCHEMAS


def names() -> list[str]:
    return list(document_names()) + list(_message_schemas())


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "schema",
        help="print the JSON Schema of a document (module, provisions, mesh, ledger, "
        "declaration) or of a message (message-envelope, declaration-message, report, "
        "enrolment-request, enrolment-answer)",
        description="Without DOCUMENT, list the document types; with one, print its JSON Schema "
        "(draft 2020-12). The human reference is docs/schema.md.",
    )
    parser.add_argument("document", nargs="?", metavar="DOCUMENT",
                        help="one of: " + ", ".join(names()))
    parser.set_defaults(func=run)


def run(args, out=None) -> int:
    out = out or sys.stdout
    if args.document is None:
        for name in names():
            print(name, file=out)
        return 0
    if args.document in _message_schemas():
        schema = _message_schemas()[args.document]
    elif args.document in document_names():
        schema = json_schema(args.document)
    else:
        raise MeshError(f"no document type {args.document!r}; expected one of "
                        + ", ".join(names()))
    print(json.dumps(schema, indent=2), file=out)
    return 0
