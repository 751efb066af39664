"""What `mesh backup`, `mesh restore` and `mesh backups` share: their options and the job,
repository and Engine they read from the mesh directory and the command line."""

from __future__ import annotations

import argparse
import os
import sys

import attrs
import docker
import requests
from docker.errors import APIError

from resolver import Mesh, Module
from resolver.backups import BackupJob, backup_job

from executors.control.loading import load_mesh_dir
from executors.node import docker_engine as engine
from executors.node.backup import state_paths
from executors.node.node_paths import DEFAULT_STATE_ROOT
from executors.node.restic import Repository

PASSWORD_ENV = "MESH_BACKUP_PASSWORD_FILE"
# the Engine failing under a backup or restore: said in one line, exit 1
ENGINE_ERRORS = (APIError, requests.exceptions.ConnectionError)


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", metavar="DIR",
                        help="the mesh directory (mesh.yaml names the backup target under "
                        "`backups:`, the catalogue says how each module is backed up)")
    parser.add_argument("--password-file", metavar="FILE", default=os.environ.get(PASSWORD_ENV),
                        help="the file holding the backup repository's password, mode 0600 "
                        f"(${PASSWORD_ENV}); the first backup makes the repository with it")
    parser.add_argument("--docker-host", default=os.environ.get("DOCKER_HOST"),
                        help="Docker Engine running the instance (default: $DOCKER_HOST or "
                        "the local socket)")
    parser.add_argument("--state-root", default=None, metavar="DIR",
                        help="where the node keeps instances' state (default "
                        f"{DEFAULT_STATE_ROOT})")


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


def job_of(state: Loaded, instance: str) -> BackupJob:
    return backup_job(state.mesh, state.modules, instance)


def paths_of(args: argparse.Namespace, job: BackupJob) -> tuple[str, ...]:
    return state_paths(job, args.state_root) if args.state_root else state_paths(job)


def api_of(args: argparse.Namespace) -> docker.APIClient:
    return engine.connect(args.docker_host, timeout=600)


def size(count: int) -> str:
    """Bytes for a person: 512 B, 3.4 KiB, 12.0 MiB."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def age(seconds: int) -> str:
    if seconds < 120:
        return f"{max(seconds, 0)}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"
