"""The self-hosting transition done by the control plane: once the mesh's registry serves, the
local builds (`mesh build DIR --local`, genesis) are pushed into it before declarations are
written, so the publish that follows names the registry (issue 28).

Invariants:
- It acts only when the ledger holds a local build, the mesh declares its artifact store (the
  resolver's choice, with its port kept in the ledger) and that registry answers its v2 API,
  verified against the mesh CA (control/trust.py), and a Docker Engine answers; the push is
  building.push_local_builds, the same code `mesh build` uses, with the control node's push
  account (trust.push_auth). Anything missing leaves every local record as it is (the
  declarations name the local image, as before) and says why in one plain line; the next
  publish tries again.
- Each build's record moves to the registry's digest in one ledger transaction of its own
  (push_local_builds: the new digest and `mirrored` together, or nothing), so a failure
  midway keeps what was pushed before it and the local records after it: never half-recorded.
- The outcome is a value (SelfHosting); nothing secret is said.
"""

from __future__ import annotations

import enum
import os
from typing import Callable, Optional

import attrs
import docker
import docker.errors
import requests

from resolver import MeshError, resolve_inputs

from executors.common.marks import ENGINE_API_VERSION, ENGINE_SOCKET
from executors.control.building import local_builds, push_local_builds
from executors.control.loading import PathLike, load_mesh_dir
from executors.control.registry import RegistryClient, RegistryError
from executors.control.trust import push_auth, registry_trust

Say = Callable[[str], None]
#: What a Docker Engine that does not answer, or stops answering, raises.
ENGINE_ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException)
#: How long the registry's and the Engine's answers are waited for (connect, read): a publish
#: must not stall on a registry that is not up yet.
PROBE_TIMEOUT = (3.0, 10.0)


class Outcome(enum.Enum):
    NOTHING_LOCAL = "nothing-local"  # no local build in the ledger: nothing to do
    KEPT = "kept"  # local builds kept as they are (`reason` says why); tried again next time
    PUSHED = "pushed"  # every local build pushed and recorded at the registry's digest
    PARTLY = "partly"  # some pushed, the rest kept (each said through `say`)


class Why(enum.Enum):
    """Why local builds were kept."""

    NO_REGISTRY = "no-registry"  # the mesh declares no artifact store (with its port)
    NOT_ANSWERING = "not-answering"  # the registry does not answer (verified TLS)
    NO_KEY = "no-key"  # no control node key to open the push account
    NO_PUSH_ACCOUNT = "no-push-account"  # the push account is not issued, or not opened
    NO_ENGINE = "no-engine"  # no Docker Engine answers
    PUSH_FAILED = "push-failed"  # a push was refused or failed (said through `say`)


@attrs.frozen
class SelfHosting:
    outcome: Outcome
    pushed: tuple[str, ...] = ()  # "module/artifact" now recorded at the registry's digest
    kept: tuple[str, ...] = ()  # still local
    registry: Optional[str] = None
    why: Optional[Why] = None  # why they were kept, when any was
    reason: str = ""  # the same in one line, with the details


def engine_url(docker_host: Optional[str] = None) -> str:
    """The Docker Engine the control node pushes through: `docker_host`, else $DOCKER_HOST,
    else the local socket (as `mesh build` finds it)."""
    return docker_host or os.environ.get("DOCKER_HOST") or ENGINE_SOCKET


def push_when_served(mesh_dir: PathLike, key_file: Optional[str], *,
                     docker_host: Optional[str] = None,
                     say: Say = lambda line: None) -> SelfHosting:
    """Push every local build into the mesh's registry when it serves (see the invariants);
    what was done, as a value. Lines through `say`: the pushes, or why nothing was pushed."""
    inputs = load_mesh_dir(mesh_dir)
    local = tuple(local_builds(inputs.ledger))
    if not local:
        return SelfHosting(Outcome.NOTHING_LOCAL)
    registry = resolve_inputs(inputs).registry

    def kept(why: Why, reason: str) -> SelfHosting:
        say(f"self-hosting: {', '.join(local)} kept as local build(s), published as they are: "
            f"{reason}; tried again at the next publish")
        return SelfHosting(Outcome.KEPT, kept=local, registry=registry, why=why, reason=reason)

    if registry is None:
        return kept(Why.NO_REGISTRY, "the mesh declares no registry (an instance providing "
                    "artifact-store, its port in the ledger)")
    try:
        RegistryClient(timeout=PROBE_TIMEOUT, trust=registry_trust(inputs)).ping(registry)
    except RegistryError as error:
        return kept(Why.NOT_ANSWERING,
                    f"the mesh's registry {registry} does not answer ({error})")
    if key_file is None:
        return kept(Why.NO_KEY,
                    "no --key (the control node's key opens the registry's push account)")
    try:
        auth = push_auth(inputs, key_file).get(registry)
    except MeshError as error:
        return kept(Why.NO_PUSH_ACCOUNT, f"the push account: {error}")
    url = engine_url(docker_host)
    api = docker.APIClient(base_url=url, version=ENGINE_API_VERSION, timeout=600)
    try:
        api.ping()
    except ENGINE_ERRORS as error:
        return kept(Why.NO_ENGINE, f"no Docker Engine answers at {url} "
                    f"({type(error).__name__}), and a local build is pushed from the Engine "
                    f"that holds it")
    say(f"self-hosting: the mesh's registry {registry} answers; pushing the local build(s) "
        f"{', '.join(local)} into it")
    try:
        _, pushed, failed = push_local_builds(inputs, inputs.ledger, registry, api, auth, say)
    except ENGINE_ERRORS as error:  # the Engine went away midway: what was pushed is recorded
        return kept(Why.NO_ENGINE, f"the Docker Engine at {url} failed during the push "
                    f"({type(error).__name__})")
    outcome = Outcome.PUSHED if not failed else Outcome.PARTLY if pushed else Outcome.KEPT
    if failed:
        say(f"self-hosting: {', '.join(failed)} kept as local build(s) (said above); tried "
            f"again at the next publish")
    return SelfHosting(outcome, pushed=tuple(pushed), kept=tuple(failed), registry=registry,
                       why=Why.PUSH_FAILED if failed else None,
                       reason="the push failed (said above)" if failed else "")
