"""The mesh resolver: manifests + mesh description + ledger in, the whole mesh state out.

Pure: no filesystem, network, clock, randomness, environment or logging. Everything it needs
is an argument; everything it decides is in its return value. See DESIGN.md.

The public API is exactly `__all__`: every name a program embedding the library (and the
executors, tests and benchmarks of this repository) may import. The modules whose names start
with `_` are private; a test fails on any import of them from outside resolver/. Every
exception the library raises is a MeshError.
"""

from ._resolve import (  # noqa: F401
    resolve,
)
from ._check import (  # noqa: F401
    validate,
)
from ._resolution import (  # noqa: F401
    Resolution,
)
from ._select import (  # noqa: F401
    Selection,
    select_provider,
)
from ._bound import (  # noqa: F401
    credential_id,
    secret_id,
)
from ._render import (  # noqa: F401
    STATE_ROOT,
    container_name,
    state_host_path,
)
from ._records import (  # noqa: F401
    newest_written,
    next_serial,
    record_declared,
)
from ._digest import (  # noqa: F401
    declaration_digest,
)
from ._errors import (  # noqa: F401
    Fault,
    InputError,
    MeshError,
    PlaceholderSyntaxError,
    ResolutionError,
    one_line,
)
from ._rotation import (  # noqa: F401
    SLOTS,
    RotationError,
    accepted_generations,
    begin_rotation,
    declared_grants,
    describe_rotation,
    first_generation,
    grant_view,
    holder_applied,
    holder_generation,
    holder_nodes,
    idle_slot,
    in_progress,
    is_dual,
    is_own_secret,
    next_generation_number,
    provider_applied,
    provider_first,
    provider_generations,
    record_applied,
    report_applied,
    reseal,
    server_held_credentials,
    server_held_secrets,
    waiting_holders,
    window_holders,
)
from ._codes import (  # noqa: F401
    AMBIGUOUS_PROVIDER,
    BLOCKED_BY_PROVIDER,
    ChosenBy,
    DUPLICATE_CLAIM,
    EXPOSURE_FAMILY,
    FACILITY_MISSING,
    FLOOR_CONFLICT,
    HELD,
    MISSING_PUBLIC_KEY,
    MOVE_WITH_STATE,
    NOT_A_PROVIDER,
    NO_PROVIDER,
    PENDING_CREDENTIAL,
    PORT_CONFLICT,
    PORT_RANGE_EXHAUSTED,
    PORT_RELEASED,
    PROVIDER_MOVED,
    PROVIDER_NODE_UNKNOWN,
    PROVIDER_NOT_ASSIGNED,
    ProblemCode,
    REQUIREMENT_STATES,
    SECOND_MESH_PROVIDER,
    STALE_STATE_FROM,
    STATE_FROM_MISMATCH,
    STATE_PATH_OWNERS,
    Severity,
    UNDECLARED_MOUNT,
    UNKNOWN_DEFAULT,
    UNKNOWN_LISTEN,
    UNKNOWN_MODULE,
    UNKNOWN_NODE,
    UNKNOWN_PART,
    UNKNOWN_PROVISION,
    UNPINNED_ARTIFACT,
)
from ._model import (  # noqa: F401
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
from ._inputs import (  # noqa: F401
    Catalogue,
    NO_SOURCES,
    Sources,
)
from ._ledger import (  # noqa: F401
    BuildRecord,
    Certificate,
    Credential,
    EMPTY_LEDGER,
    Generation,
    LEDGER_VERSION,
    Ledger,
    NodeSerial,
    PortAssignment,
)
from ._frozen import FrozenMap
from ._declaration import (  # noqa: F401
    FileDecl,
    RegistryLogin,
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
)
from ._plan import (  # noqa: F401
    ContainerChange,
    container_causes,
    container_changes,
)
from ._secret_ways import SecretWay, secret_way  # noqa: F401
from ._model import GRANT_KINDS, ROTATION_WAYS, SecretRotation  # noqa: F401
from ._changes import (  # noqa: F401
    SECTION_NAMES,
    DeclarationChange,
    apply_changes,
    change_counts,
    declaration_changes,
)
from ._convert import (  # noqa: F401
    document_key,
    unstructure,
    unstructure_full,
    yaml_key,
)
from ._load import (  # noqa: F401
    DocumentPositions,
    Parsed,
    load_document,
    parse_document,
    parse_yaml,
    structure,
)
from ._yaml import (  # noqa: F401
    LIMITS,
    MAX_DOCUMENT_BYTES,
    decode_document,
)
from ._documents import (  # noqa: F401
    Inputs,
    dump_ledger,
    dump_yaml,
    load_inputs,
    load_ledger,
    load_mesh,
    load_module,
    load_provisions,
    resolve_inputs,
)
from ._mesh_dir import (  # noqa: F401
    DEFAULT_CATALOGUE,
    DEFAULT_LEDGER,
    MESH_FILE,
    MODULE_FILE,
    PROVISIONS_FILE,
    MeshPaths,
    MeshReader,
    ReadFault,
    load_mesh_dir,
    mesh_paths,
)
from ._schema import (  # noqa: F401
    document_names,
    json_schema,
)
from ._placeholders import (  # noqa: F401
    fill_secret_tokens,
    secret_tokens,
    placeholders,
    render_placeholders,
    secret_token,
)
from ._artifacts import (  # noqa: F401
    ARTIFACT_STORE,
    EXTERNAL,
    PinRequest,
    SELF_HOSTING,
    artifact_digest,
    artifact_key,
    artifact_state,
    artifacts_changed_by_pins,
    build_graph,
    catalogue_artifacts,
    choose_artifact_store,
    choose_artifact_store_instance,
    containers_using,
    current_digests,
    image_reference,
    is_loopback,
    pending_mirror,
    pin_key,
    pin_requests,
    split_repository,
    stale,
    staleness,
    used_artifacts,
    validate_artifact_store_modules,
    validate_build_graph,
    with_pins,
)
from ._certs import (  # noqa: F401
    certificate_reason,
    certificate_requests,
    epoch_seconds,
    renewal_due,
)
from ._picture import (  # noqa: F401
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
from ._tls import (  # noqa: F401
    TLS_REQUEST,
    TRUST_DIR,
    is_tls_credential,
    tls_credential,
    tls_reason,
)
from ._registry_access import (  # noqa: F401
    ACCOUNT_KIND as REGISTRY_ACCOUNT_KIND,
    AUTH_HOST_DIR as REGISTRY_AUTH_HOST_DIR,
    HTPASSWD,
    PUSH_LOGIN,
    account_user as registry_user,
    pull_credential,
    push_credential,
)
from ._dot import (  # noqa: F401
    binding_id,
    instance_id,
    mesh_dot,
    problem_id,
    render_dot,
    escape as dot_escape,
    quote as dot_quote,
    LEGEND as DOT_LEGEND,  # the legend line every rendered picture ends its label with
)
from ._firewall import (  # noqa: F401
    assign_macs,  # container name → MAC on one node: a hash of mesh and name, unique per node
)

__all__ = [
    # Resolving
    "resolve", "resolve_inputs", "validate", "Resolution", "Selection", "select_provider", "credential_id", "secret_id",
    "container_name", "STATE_ROOT", "state_host_path", "newest_written", "next_serial", "record_declared", "declaration_digest",
    # Errors
    "Fault", "InputError", "MeshError", "PlaceholderSyntaxError", "ResolutionError", "one_line",
    "RotationError",
    # Problem codes
    "ChosenBy", "ProblemCode", "Severity", "REQUIREMENT_STATES", "AMBIGUOUS_PROVIDER",
    "BLOCKED_BY_PROVIDER", "DUPLICATE_CLAIM", "EXPOSURE_FAMILY", "FACILITY_MISSING",
    "FLOOR_CONFLICT", "HELD", "MISSING_PUBLIC_KEY", "MOVE_WITH_STATE", "NOT_A_PROVIDER",
    "NO_PROVIDER", "PENDING_CREDENTIAL", "PORT_CONFLICT", "PORT_RANGE_EXHAUSTED", "PORT_RELEASED",
    "PROVIDER_MOVED", "PROVIDER_NODE_UNKNOWN", "PROVIDER_NOT_ASSIGNED", "SECOND_MESH_PROVIDER",
    "STALE_STATE_FROM", "STATE_FROM_MISMATCH", "STATE_PATH_OWNERS", "UNDECLARED_MOUNT",
    "UNKNOWN_DEFAULT", "UNKNOWN_LISTEN", "UNKNOWN_MODULE", "UNKNOWN_NODE", "UNKNOWN_PART",
    "UNKNOWN_PROVISION", "UNPINNED_ARTIFACT",
    # The model
    "Access", "Artifact", "CaConfig", "Container", "Exposure", "Floor", "Health", "HttpCheck",
    "Instance", "Listen", "Mesh", "Module", "Mount", "Node", "Part", "PortRange", "Provide",
    "Provision", "Provisions", "Require", "StateDir", "Substrate", "NO_SOURCES", "Catalogue",
    "Sources",
    # The ledger
    "EMPTY_LEDGER", "LEDGER_VERSION", "BuildRecord", "Certificate", "Credential", "Generation",
    "Ledger", "NodeSerial", "PortAssignment",
    # Declarations
    "FrozenMap", "AccessDecl", "Binding", "BindingDecl", "Change", "ContainerDecl", "Declaration",
    "FirewallAllow", "FirewallExposure", "FirewallFloor", "FirewallIntent", "FirewallLocal",
    "GrantDecl", "HealthDecl", "HeldDecl", "InstanceRendering", "MountDecl", "Problem",
    "ProviderDecl", "PublishedPort", "Request", "SecretRef", "StateDirDecl", "FileDecl",
    "RegistryLogin",
    # The mesh registry: TLS from the mesh CA, accounts
    "TLS_REQUEST", "TRUST_DIR", "is_tls_credential", "tls_credential", "tls_reason",
    "REGISTRY_ACCOUNT_KIND", "REGISTRY_AUTH_HOST_DIR", "HTPASSWD", "PUSH_LOGIN", "registry_user",
    "pull_credential",
    "push_credential",
    # Plan diff
    "ContainerChange", "container_causes", "container_changes", "DeclarationChange",
    "SECTION_NAMES", "apply_changes", "change_counts", "declaration_changes",
    # How a rotated own secret takes effect
    "GRANT_KINDS", "ROTATION_WAYS", "SecretRotation", "SecretWay", "secret_way",
    # Documents
    "document_key", "structure", "unstructure", "unstructure_full", "yaml_key",
    "DocumentPositions", "Parsed", "load_document", "parse_document", "parse_yaml", "LIMITS",
    "MAX_DOCUMENT_BYTES", "decode_document", "Inputs", "dump_ledger", "dump_yaml", "load_inputs",
    "load_ledger", "load_mesh", "load_module", "load_provisions", "document_names", "json_schema",
    # A mesh directory: its path rules, read through the caller's reader
    "load_mesh_dir", "MeshReader", "ReadFault", "MeshPaths", "mesh_paths", "MESH_FILE",
    "MODULE_FILE", "PROVISIONS_FILE", "DEFAULT_CATALOGUE", "DEFAULT_LEDGER",
    # Placeholders
    "fill_secret_tokens", "placeholders", "render_placeholders", "secret_token", "secret_tokens",
    # Artifacts
    "ARTIFACT_STORE", "EXTERNAL", "SELF_HOSTING", "PinRequest", "artifact_digest", "artifact_key",
    "artifact_state", "artifacts_changed_by_pins", "build_graph", "catalogue_artifacts",
    "choose_artifact_store", "choose_artifact_store_instance", "containers_using", "current_digests", "image_reference",
    "is_loopback", "pending_mirror", "pin_key", "pin_requests", "split_repository", "stale",
    "staleness", "used_artifacts", "validate_artifact_store_modules", "validate_build_graph",
    "with_pins",
    # Certificates
    "certificate_reason", "certificate_requests", "epoch_seconds", "renewal_due",
    # Rotation
    "SLOTS", "accepted_generations", "begin_rotation", "declared_grants", "describe_rotation",
    "first_generation", "grant_view", "holder_applied", "holder_generation", "holder_nodes",
    "idle_slot", "in_progress", "is_dual", "is_own_secret", "next_generation_number",
    "provider_applied", "provider_first", "provider_generations", "record_applied",
    "report_applied", "reseal", "server_held_credentials", "server_held_secrets",
    "waiting_holders", "window_holders",
    # The picture
    "EdgeView", "InstanceView", "MeshPicture", "NodeView", "Opening", "ProblemView", "binding_key",
    "focus", "in_written_order", "mesh_picture", "problem_key", "binding_id", "instance_id",
    "mesh_dot", "problem_id", "render_dot", "dot_escape", "dot_quote", "DOT_LEGEND",
    # Firewall naming
    "assign_macs",
]
