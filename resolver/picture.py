"""A picture of a resolved mesh: plain views of its nodes, instances, bindings and problems
(`mesh_picture`), and their DOT text for Graphviz (`mesh_dot`, byte-stable and safely
quoted), which is what `mesh graph` draws.
"""

from ._dot import LEGEND as DOT_LEGEND
from ._dot import binding_id, instance_id, mesh_dot, problem_id, render_dot
from ._dot import escape as dot_escape
from ._dot import quote as dot_quote
from ._picture import (EdgeView, InstanceView, MeshPicture, NodeView, Opening, ProblemView,
                       mesh_picture, problem_key)
from ._names import NameRecord, name_records

__all__ = [
    # The picture, as plain data
    "mesh_picture", "MeshPicture", "NodeView", "InstanceView", "EdgeView", "ProblemView",
    "Opening", "problem_key",
    # Its DOT text
    "mesh_dot", "render_dot", "instance_id", "binding_id", "problem_id", "dot_quote",
    "dot_escape", "DOT_LEGEND",
    # Web names and where they answer (`mesh names`)
    "name_records", "NameRecord",
]
