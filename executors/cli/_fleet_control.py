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
from executors.control.control_state import ControlState
from executors.control.loading import load_mesh_dir


def settings(args: argparse.Namespace, inputs: Inputs) -> BrokerSettings:
    """The broker settings the options give (None: not given), the rest from the mesh."""
    broker: Optional[str] = args.broker
    api: Optional[str] = args.broker_api
    admin: Optional[str] = args.broker_admin
    admin_password_file: Optional[str] = args.broker_admin_password_file
    for_nodes: Optional[str] = args.broker_for_nodes
    key: Optional[str] = args.key
    return settings_from(inputs, broker=broker, api=api, admin=admin,
                         admin_password_file=admin_password_file, for_nodes=for_nodes, key=key)


def control(args: argparse.Namespace, *, issue: bool = True, interval: float = 5.0) -> Control:
    """The Control of the mesh in args.directory (the mesh loaded, the broker settings made)."""
    directory: str = args.directory
    state_dir: Optional[str] = args.state_dir
    key: Optional[str] = args.key
    inputs = load_mesh_dir(directory)
    return Control(mesh_dir=Path(inputs.mesh_dir), settings=settings(args, inputs),
                   state=ControlState(inputs.mesh_dir, state_dir), say=say,
                   key_file=key, issue=issue, interval=interval)
