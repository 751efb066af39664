"""The mesh resolver: manifests + mesh description + ledger in, the whole mesh state out.

Pure: no filesystem, network, clock, randomness, environment or logging. Everything it needs
is an argument; everything it decides is in its return value. See DESIGN.md.

The root holds what a program embedding the library needs (docs/embedding.md): loading a mesh
(`load_mesh_dir` through the caller's `MeshReader`, or `load_inputs` from documents in memory),
`resolve` and `resolve_inputs`, `validate`, the plan diff, and the types of what goes in and
comes out (the model, the ledger, the declarations, the problem codes, the errors). The tools
the `mesh` command is built from are in public submodules, each with its own `__all__`:

- `resolver.documents`: one document at a time (load, parse, dump), the strict converter, the
  JSON Schema, a mesh directory's path rules;
- `resolver.rotation`: the generations of credentials and own secrets, rotation by rotation;
- `resolver.artifacts`: pins, the build graph, staleness, the mesh registry's accounts;
- `resolver.certificates`: node certificates and the artifact store's TLS certificate;
- `resolver.picture`: a resolved mesh as plain views and as DOT text;
- `resolver.rendering`: a declaration's digest and serials, secret tokens and placeholders,
  the names rendering gives.
- `resolver.backups`: which backup one instance gets, which snapshot may be restored, which
  schedules are overdue.
- `resolver.incremental`: `resolve_from`, a resolution that reuses what the previous one made
  (an explicit `Reuse` value handed in and back), equal to `resolve`'s.

The public API is exactly the root's `__all__` and the submodules' own. The root's is joined
from the private modules' lists (each says what it adds to the root), so it cannot drift from
what is imported here. The modules whose names start with `_` are private; a test fails on any
import of them from outside resolver/. Every exception the library raises is a MeshError.
"""

from ._resolve import *  # noqa: F401,F403
from ._documents import *  # noqa: F401,F403
from ._mesh_dir import *  # noqa: F401,F403
from ._check import *  # noqa: F401,F403
from ._resolution import *  # noqa: F401,F403
from ._yaml import *  # noqa: F401,F403
from ._errors import *  # noqa: F401,F403
from ._rotation import *  # noqa: F401,F403
from ._codes import *  # noqa: F401,F403
from ._plan import *  # noqa: F401,F403
from ._changes import *  # noqa: F401,F403
from ._model import *  # noqa: F401,F403
from ._inputs import *  # noqa: F401,F403
from ._ledger import *  # noqa: F401,F403
from ._declaration import *  # noqa: F401,F403
from ._frozen import *  # noqa: F401,F403
from ._backups import *  # noqa: F401,F403
from . import (_backups, _changes, _check, _codes, _declaration, _documents, _errors, _frozen, _inputs,
               _ledger, _mesh_dir, _model, _plan, _resolution, _resolve, _rotation, _yaml)
from . import artifacts, backups, certificates, documents, incremental, picture, rendering, rotation

__all__ = [
    # Loading and resolving
    *_resolve.__all__, *_documents.__all__, *_mesh_dir.__all__, *_check.__all__,
    *_resolution.__all__, *_yaml.__all__,
    # Errors
    *_errors.__all__, *_rotation.__all__, *_backups.__all__,
    # What a problem, a binding's choice and a severity say
    *_codes.__all__,
    # The plan diff
    *_plan.__all__, *_changes.__all__,
    # The model (the documents' types)
    *_model.__all__, *_inputs.__all__,
    # The ledger
    *_ledger.__all__,
    # The declarations and the rest of a Resolution
    *_declaration.__all__, *_frozen.__all__,
    # The public submodules
    "documents", "rotation", "artifacts", "certificates", "picture", "rendering", "backups",
    "incremental",
]
