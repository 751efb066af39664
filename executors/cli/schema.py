"""`mesh schema [DOCUMENT]`: print the JSON Schema of a document type, or list the types.

The mesh's own documents (module, provisions, mesh, ledger, declaration) are the resolver's;
what travels over the broker (the signed envelope, a declaration message's body, a report, an
enrolment request and answer) is executors/common/message_schemas.py's.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, TextIO

from resolver import MeshError
from resolver.documents import document_names, json_schema

from executors.cli._verb import Subparsers
from executors.common.message_schemas import SCHEMAS


def names() -> list[str]:
    return list(document_names()) + list(SCHEMAS)


def register(subparsers: Subparsers) -> None:
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


def run(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    out = out or sys.stdout
    document: Optional[str] = args.document
    if document is None:
        for name in names():
            print(name, file=out)
        return 0
    if document in SCHEMAS:
        schema = SCHEMAS[document]
    elif document in document_names():
        schema = json_schema(document)
    else:
        raise MeshError(f"no document type {document!r}; expected one of "
                        + ", ".join(names()))
    print(json.dumps(schema, indent=2), file=out)
    return 0
