"""The mesh resolver: manifests + mesh description + ledger in, the whole mesh state out.

Pure: no filesystem, network, clock, randomness, environment or logging. Everything it needs
is an argument; everything it decides is in its return value. See DESIGN.md.
"""

from ._codes import *  # noqa: F401,F403  (problem codes are part of the API)
from ._convert import structure, unstructure, yaml_key
from ._declaration import (
    AccessDecl,
    Binding,
    BindingDecl,
    Change,
    ContainerDecl,
    Declaration,
    FirewallAllow,
    FirewallExposure,
    FirewallFloor,
    FirewallIntent,
    FirewallLocal,
    GrantDecl,
    HealthDecl,
    HeldDecl,
    InstanceRendering,
    MountDecl,
    Problem,
    ProviderDecl,
    PublishedPort,
    Request,
    SecretRef,
    StateDirDecl,
    secret_token,
)
from ._resolution import Resolution
from ._errors import Fault, InputError, MeshError, ResolutionError, one_line
from ._inputs import NO_SOURCES, Catalogue, Sources
from ._ledger import (
    EMPTY_LEDGER,
    LEDGER_VERSION,
    BuildRecord,
    Certificate,
    Credential,
    Generation,
    Ledger,
    NodeSerial,
    PortAssignment,
)
from ._load import DocumentPositions, Parsed, load_document, parse_document, parse_yaml
from ._yaml import LIMITS, MAX_DOCUMENT_BYTES, decode_document
from ._documents import (
    Inputs,
    dump_ledger,
    dump_yaml,
    load_inputs,
    load_ledger,
    load_mesh,
    load_module,
    load_provisions,
)
from ._schema import document_names, json_schema
from ._validate import PlaceholderSyntaxError, placeholders, render_placeholders
from ._model import (
    Access,
    Artifact,
    CaConfig,
    Container,
    Exposure,
    Floor,
    Health,
    HttpCheck,
    Instance,
    Listen,
    Mesh,
    Module,
    Mount,
    Node,
    Part,
    PortRange,
    Provide,
    Provision,
    Provisions,
    Require,
    StateDir,
    Substrate,
)

__all__ = [
    "structure", "unstructure", "yaml_key",
    "AccessDecl", "Binding", "BindingDecl", "Change", "ContainerDecl", "Declaration",
    "FirewallAllow", "FirewallExposure", "FirewallFloor", "FirewallIntent", "FirewallLocal",
    "GrantDecl", "HealthDecl", "HeldDecl", "InstanceRendering", "MountDecl",
    "Problem", "ProviderDecl", "PublishedPort", "Request", "Resolution", "SecretRef", "StateDirDecl",
    "secret_token",
    "Fault", "InputError", "MeshError", "ResolutionError", "one_line",
    "NO_SOURCES", "Catalogue", "Sources",
    "EMPTY_LEDGER", "LEDGER_VERSION", "BuildRecord", "Certificate", "Credential", "Generation",
    "Ledger", "NodeSerial", "PortAssignment",
    "DocumentPositions", "Parsed", "load_document", "parse_document", "parse_yaml",
    "LIMITS", "MAX_DOCUMENT_BYTES", "decode_document",
    "Access", "Artifact", "CaConfig", "Container", "Exposure", "Floor", "Health", "HttpCheck",
    "Instance",
    "Listen", "Mesh", "Module", "Mount", "Node", "Part", "PortRange", "Provide", "Provision",
    "Provisions", "Require", "StateDir", "Substrate",
    "Inputs", "dump_ledger", "dump_yaml", "load_inputs", "load_ledger", "load_mesh",
    "load_module", "load_provisions",
    "document_names", "json_schema",
    "PlaceholderSyntaxError", "placeholders", "render_placeholders",
]

from ._resolve import credential_id, resolve, secret_id  # noqa: E402
from ._render import container_name, declaration_digest  # noqa: E402
from ._select import select_provider, Selection  # noqa: E402
from ._records import newest_written, next_serial, record_declared  # noqa: E402

__all__ += ["resolve", "credential_id", "secret_id", "container_name", "declaration_digest",
            "select_provider", "Selection", "newest_written", "next_serial",
            "record_declared"]

from ._picture import (  # noqa: E402
    EdgeView,
    InstanceView,
    MeshPicture,
    NodeView,
    Opening,
    ProblemView,
    binding_key,
    focus,
    in_written_order,
    mesh_picture,
    problem_key,
)
from ._dot import mesh_dot, render_dot  # noqa: E402

__all__ += ["EdgeView", "InstanceView", "MeshPicture", "NodeView", "Opening", "ProblemView",
            "binding_key", "focus", "in_written_order", "mesh_picture", "problem_key",
            "mesh_dot", "render_dot"]
