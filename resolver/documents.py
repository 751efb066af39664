"""Documents as text: loading each one with its faults located, writing the ledger and YAML
back, the strict converter between plain data and the model, the JSON Schema of every
document, and the path rules of a mesh directory.

`resolver.load_mesh_dir` and `resolver.load_inputs` load a whole mesh; the names here load,
parse or write one document at a time, for tools that work on documents themselves (the
`mesh` command's loading, schema and plan verbs, the agent, the tests). Every loader raises
one `resolver.InputError` holding every fault of its document.
"""

from ._convert import document_key, unstructure, unstructure_full, yaml_key
from ._declared_record import (RECORD_FILE, NodeRecord, declared_dir, dump_record, gains,
                               load_record, records_of, rejoined, unchanged, with_records,
                               without_records)
from ._documents import Loaded, dump_yaml, load_mesh, load_module, load_provisions
from ._ledger_text import (WrittenLedger, canonical_json, dump_ledger, load_ledger,
                           written_ledger)
from ._load import (DocumentPositions, Parsed, load_document, parse_document, parse_yaml,
                    structure)
from ._mesh_dir import MESH_FILE, MeshPaths, mesh_paths
from ._reparse import ParsedText, load_mesh_again, parse_again
from ._schema import document_names, json_schema
from ._yaml import LIMITS, MANIFEST_LIMITS, MESH_LIMITS, Limits

__all__ = [
    # One document from text (or bytes, or a Parsed document), every fault located
    "load_mesh", "load_module", "load_provisions", "load_ledger", "load_document",
    "parse_document", "parse_yaml", "Parsed", "DocumentPositions", "LIMITS",
    "Limits", "MANIFEST_LIMITS", "MESH_LIMITS",
    # A document parsed again after an edit: only the entries the edit touched
    "parse_again", "ParsedText", "load_mesh_again",
    # Back to text
    "dump_ledger", "written_ledger", "WrittenLedger", "dump_yaml", "canonical_json", "Loaded",
    # The record of what was declared, one document per node beside the ledger
    "NodeRecord", "RECORD_FILE", "declared_dir", "dump_record", "load_record", "records_of",
    "with_records", "without_records", "rejoined", "unchanged", "gains",
    # The strict converter between plain data and the model
    "structure", "unstructure", "unstructure_full", "yaml_key", "document_key",
    # The JSON Schema of every document
    "document_names", "json_schema",
    # Where a mesh directory's documents are, without loading them
    "MESH_FILE", "MeshPaths", "mesh_paths",
]
