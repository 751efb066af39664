"""The Control of the mesh a broker verb names (control, publish, collect, enrol): the mesh
loaded, the broker settings made from the options cli/_fleet_options.py adds.

Needs the control extra (the broker's client, signing, sealing): a verb module that imports this
is listed as needing it when it is missing (cli/main.py). `mesh status` takes the same options
but no Control, and imports only cli/_fleet_options.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Optional

from resolver import Inputs

from executors.cli._fleet_options import say
from executors.control.broker_settings import BrokerSettings, settings_from
from executors.control.control_loop import Control
from executors.control.control_settings import kept_admin_password, read_kept, settings_path
from executors.control.control_state import ControlState
from executors.control.loading import load_mesh_dir


def settings(args: argparse.Namespace, inputs: Inputs) -> BrokerSettings:
    """The broker settings the options give (None: not given), else those kept in the control
    state (`mesh init` keeps its own: control/control_settings.py), the rest from the mesh."""
    state_dir: Optional[str] = getattr(args, "state_dir", None)
    path = settings_path(ControlState(inputs.mesh_dir, state_dir).root)
    kept = read_kept(path)
    broker: Optional[str] = args.broker or kept.broker
    api: Optional[str] = args.broker_api or kept.broker_api
    admin: Optional[str] = args.broker_admin or kept.broker_admin
    admin_password_file: Optional[str] = args.broker_admin_password_file
    for_nodes: Optional[str] = args.broker_for_nodes or kept.broker_for_nodes
    key: Optional[str] = args.key
    plain: bool = args.broker_plain or kept.broker_plain
    password = None if admin_password_file else kept_admin_password(kept, key, path)
    return settings_from(inputs, broker=broker, api=api, admin=admin,
                         admin_password_file=admin_password_file, for_nodes=for_nodes, key=key,
                         plain=plain, admin_password=password)


def control(args: argparse.Namespace, *, issue: bool = True, interval: float = 5.0) -> Control:
    """The Control of the mesh in args.directory (the mesh loaded, the broker settings made)."""
    directory: str = args.directory
    state_dir: Optional[str] = args.state_dir
    key: Optional[str] = args.key
    inputs = load_mesh_dir(directory)
    return Control(mesh_dir=Path(inputs.mesh_dir), settings=settings(args, inputs),
                   state=ControlState(inputs.mesh_dir, state_dir), say=say,
                   key_file=key, issue=issue, interval=interval)
