"""What `mesh backup`, `mesh restore` and `mesh backups` share: their options and the job,
repository and Engine they read from the mesh directory and the command line."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Iterator

import attrs
import docker
import requests
from docker.errors import APIError

from resolver import Declaration, Mesh, Module
from resolver.backups import BackupJob, backup_job

from executors.cli._sizes import age as age, size as size  # the backup verbs' own words
from executors.control.loading import load_mesh_dir
from executors.node import docker_engine as engine
from executors.node.backup import state_paths
from executors.node.backup_target import (DEFAULT_KEY_FILE, KEY_ENV, duty_of,
                                          in_force_declaration, open_repository)
from executors.node.node_paths import (DEFAULT_STATE_ROOT, NodePaths, default_file_root,
                                       default_state_root)
from executors.node.restic import Repository

PASSWORD_ENV = "MESH_BACKUP_PASSWORD_FILE"
# the Engine failing under a backup or restore: said in one line, exit 1
ENGINE_ERRORS = (APIError, requests.exceptions.ConnectionError)


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", metavar="DIR",
                        help="the mesh directory (mesh.yaml names the backup target under "
                        "`backups:`, the catalogue says how each module is backed up)")
    parser.add_argument("--password-file", metavar="FILE", default=os.environ.get(PASSWORD_ENV),
                        help="an outside repository's (`target: {node, repository}`) "
                        f"password file, mode 0600 (${PASSWORD_ENV}); the first backup makes "
                        "the repository with it. A backup store of the mesh (`target: "
                        "INSTANCE`) needs none: its login and password are sealed to this node")
    parser.add_argument("--declaration", metavar="FILE", default=None,
                        help="with a backup store of the mesh: this node's declaration "
                        "(default: the one in force, <state root>/.mesh/agent/current/)")
    parser.add_argument("--secrets", metavar="FILE", default=None,
                        help="with a backup store of the mesh: the sealed values of that "
                        "declaration (default: the ones in force beside it)")
    parser.add_argument("--key", metavar="FILE", default=None,
                        help="this machine's node key (on the instance's node it opens the "
                        f"backup store's sealed login; default ${KEY_ENV}, else "
                        f"{DEFAULT_KEY_FILE})")
    parser.add_argument("--file-root", metavar="DIR", default=None,
                        help="where the declaration's files are (the mesh CA restic verifies "
                        "the backup store with; default $MESH_FILE_ROOT, else /)")
    parser.add_argument("--docker-host", default=os.environ.get("DOCKER_HOST"),
                        help="Docker Engine running the instance (default: $DOCKER_HOST or "
                        "the local socket)")
    parser.add_argument("--state-root", default=None, metavar="DIR",
                        help="where the node keeps instances' state (default "
                        f"{DEFAULT_STATE_ROOT})")
    parser.add_argument("--state-dir", metavar="DIR",
                        help="on the control node: the control plane's own files (the nodes "
                        "enrolled, their reports; default DIR/.control)")


@attrs.frozen
class Loaded:
    mesh: Mesh
    modules: dict[str, Module]


def loaded(args: argparse.Namespace) -> Loaded:
    inputs = load_mesh_dir(args.directory)
    return Loaded(mesh=inputs.mesh, modules=dict(inputs.catalogue.modules))


def repository(args: argparse.Namespace, location: str) -> Repository:
    """The repository at `location`, opened with --password-file (a usage error without)."""
    if not args.password_file:
        print("mesh: the backup repository's password file is needed: --password-file or "
              f"${PASSWORD_ENV}", file=sys.stderr)
        raise SystemExit(2)
    return Repository(location=location, password_file=str(args.password_file))


def store_target(state: Loaded) -> bool:
    """Whether mesh.yaml's backup target is a backup store of the mesh (`target: INSTANCE`)."""
    target = state.mesh.backups.target
    return target is not None and target.instance is not None


def node_paths(args: argparse.Namespace) -> NodePaths:
    return NodePaths(args.state_root or default_state_root(),
                     args.file_root or default_file_root())


def node_declaration(args: argparse.Namespace) -> Declaration:
    return in_force_declaration(node_paths(args), args.declaration)


@contextlib.contextmanager
def opened(args: argparse.Namespace, state: Loaded, job: BackupJob) -> Iterator[Repository]:
    """The repository `job`'s instance is backed up into: its duty's on a backup store of the
    mesh (opened with the values sealed to this node), else the outside repository opened
    with --password-file."""
    if not store_target(state):
        yield repository(args, job.repository)
        return
    declaration = node_declaration(args)
    with open_repository(duty_of(declaration, job.instance), declaration, node_paths(args),
                         key_file=args.key, secrets_path=args.secrets) as repo:
        yield repo


def job_of(state: Loaded, instance: str) -> BackupJob:
    return backup_job(state.mesh, state.modules, instance)


def paths_of(args: argparse.Namespace, job: BackupJob) -> tuple[str, ...]:
    return state_paths(job, args.state_root) if args.state_root else state_paths(job)


def api_of(args: argparse.Namespace) -> docker.APIClient:
    return engine.connect(args.docker_host, timeout=600)
