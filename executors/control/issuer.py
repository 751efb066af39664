"""The issuer: turns a resolution's requests into sealed secrets and signed certificates.

Invariants:
- Every secret comes from the OS CSPRNG (`secrets`) and exists only in memory: it is sealed
  separately to each holder node's public key and only the sealed values reach the ledger.
- Issuing is idempotent: a request the ledger already satisfies (a generation sealed to every
  holder, a kept certificate) is never issued again; issuing twice equals issuing once.
- Nodes without a public key are all named in one error before anything is issued.
- Rotation follows resolver/_rotation.py: a new generation per credential addressed, sealed to
  the holders of the current one; the rules of when holders move are the resolver's.
- Holders changing (an instance moved) is not a rotation: the same values are re-sealed to the
  new holders and every generation keeps its number (resolver/_rotation.reseal).
- Trust decision: every value is also sealed to the control node's key (`escrow`). The control
  node issues every secret, so it could read each one already when issuing it; the escrow
  only lets it read one again, to re-seal it to a node an instance moved to, when given the
  control node's private key (`mesh plan --issue --key`). No holder is ever told an escrowed
  value, and a node's apply opens only what is sealed to that node. Without the escrow (a
  mesh with no control node key, or values issued before it existed) a move needs the
  control node to hold the value itself, or a rotation; the refusal says which. The escrow
  is keyed by the control node's name when the value was sealed; every box in it is tried
  with the key given, so a control node moved to another node (`mesh control restore
  --node`: same key, new name) still opens what was escrowed before.
"""

from __future__ import annotations

import secrets
from typing import Callable, Iterable, Optional, Sequence

import attrs
from nacl.public import PrivateKey
from pyrsistent import pmap, pvector
from pyrsistent.typing import PMap

from resolver import (
    Certificate,
    Credential,
    Generation,
    Inputs,
    Ledger,
    Mesh,
    MeshError,
    Request,
    Resolution,
    resolve_inputs,
)
from resolver.certificates import certificate_reason
from resolver.rotation import (
    begin_rotation,
    holder_nodes,
    in_progress,
    next_generation_number,
    reseal,
)

from resolver.certificates import (TLS_REQUEST, is_name_key, is_tls_credential,
                                  is_transfer_key, name_key, name_of_key, name_reason,
                                  tls_credential, tls_reason, transfer_key)

from .ca import CaError, MeshCa, ca_pem, iso, load_ca, sign_name, sign_node, sign_server, utc_now
from .ledger_transaction import Transacted, transact
from .loading import PathLike
from executors.common.keys import UnsealError, sealed_to_each, unseal

Entropy = Callable[[], str]


class IssueError(MeshError):
    """A request the issuer cannot honour (a node without a key, an unknown credential…)."""


def new_secret() -> str:
    """A fresh secret: 32 bytes from the OS CSPRNG, URL-safe (fits any password field)."""
    return secrets.token_urlsafe(32)


def _public_keys(mesh: Mesh, holders: Iterable[str]) -> dict[str, str]:
    """Each holder's public key (check_keys refused a holder without one before)."""
    keys: dict[str, str] = {}
    for node in holders:
        key = mesh.nodes[node].public_key
        if not key:
            raise IssueError(f"cannot seal to node {node}: it has no public-key in mesh.yaml")
        keys[node] = key
    return keys


def check_keys(mesh: Mesh, requests: Iterable[Request]) -> None:
    """Refuse, naming every node, when a holder has no public key (or is not in the mesh)."""
    missing, unknown = set(), set()
    for request in requests:
        for node in request.holders:
            if node not in mesh.nodes:
                unknown.add(node)
            elif not mesh.nodes[node].public_key:
                missing.add(node)
    if unknown:
        raise IssueError(f"cannot seal to node(s) not in mesh.yaml: {', '.join(sorted(unknown))}")
    if missing:
        names = ", ".join(sorted(missing))
        raise IssueError(
            f"cannot seal secrets to node(s) without a public-key in mesh.yaml: {names}. "
            f"On each, run `mesh node-key NODE --path /etc/mesh/node.key` and add the printed "
            f"`public-key:` line under that node in mesh.yaml")


def control_node(mesh: Mesh) -> Optional[str]:
    """The control node, when it has a key to seal the escrow to."""
    return next((name for name, node in sorted(mesh.nodes.items())
                 if node.control and node.public_key), None)


def _escrow(mesh: Mesh, value: str) -> PMap[str, str]:
    control = control_node(mesh)
    return pmap(sealed_to_each(_public_keys(mesh, [control]), value) if control else {})


def _sealed(mesh: Mesh, holders: Iterable[str], value: str) -> PMap[str, str]:
    """`value` sealed to each holder's public key: holder → sealed box, a frozen value."""
    return pmap(sealed_to_each(_public_keys(mesh, holders), value))


def _generations(credential: Credential) -> list[Generation]:
    return [g for g in (credential.active, credential.pending, credential.retiring)
            if g is not None]


def _resealing(ledger: Ledger, request: Request) -> Optional[Credential]:
    """The issued credential whose holders this request changes, or None."""
    credential = ledger.credentials.get(request.id)
    if credential is None or credential.active is None:
        return None
    newest = credential.pending or credential.active
    return None if set(request.holders) == set(newest.sealed) else credential


def _unseal_any(key: PrivateKey, boxes: Sequence[str]) -> str:
    """The first of `boxes` that `key` opens; UnsealError when none does."""
    for box in boxes[:-1]:
        try:
            return unseal(key, box)
        except UnsealError:
            continue
    return unseal(key, boxes[-1])


def open_for_reseal(mesh: Mesh, ledger: Ledger, requests: Iterable[Request],
                    control_key: Optional[PrivateKey]) -> dict[tuple[str, int], str]:
    """(credential id, generation) → value, for every generation a changed holder set needs
    sealed to a new node: opened from the control node's escrow (or its own sealed box) with
    `control_key`. Every one that cannot be opened is named in one IssueError, before
    anything is issued."""
    control = control_node(mesh) or next((n for n, node in sorted(mesh.nodes.items())
                                          if node.control), None)
    values: dict[tuple[str, int], str] = {}
    refused: list[str] = []
    for request in sorted(requests):
        credential = _resealing(ledger, request)
        if credential is None:
            continue
        for generation in _generations(credential):
            if set(request.holders) <= set(generation.sealed):
                continue  # only nodes dropped: nothing to open
            # the escrow is keyed by the control node's name when it was sealed: a control
            # node moved (`mesh control restore --node`) keeps the key, not the name
            boxes = [box for box in (generation.escrow.get(control) if control else None,
                                     generation.sealed.get(control) if control else None,
                                     *(b for n, b in sorted(generation.escrow.items())
                                       if n != control)) if box]
            box = boxes[0] if boxes else None
            where = f"{request.id} generation {generation.generation}"
            if box is None:
                refused.append(f"{where}: sealed neither to the control node"
                               + (f" {control}" if control else " (mesh.yaml names none)")
                               + f" nor to its escrow, only to "
                               f"{', '.join(sorted(generation.sealed))}")
            elif control_key is None:
                refused.append(f"{where}: re-sealing it to "
                               f"{', '.join(sorted(set(request.holders) - set(generation.sealed)))}"
                               f" needs the control node's key: pass `--key FILE` "
                               f"({control}'s private key)")
            else:
                try:
                    values[(request.id, generation.generation)] = _unseal_any(control_key,
                                                                             boxes)
                except UnsealError:
                    refused.append(f"{where}: the key given with --key does not open its "
                                   f"escrow: it is not {control}'s key")
    if refused:
        raise IssueError("cannot re-seal to the new holders (no new generation is issued for "
                         "a move):\n  " + "\n  ".join(refused)
                         + "\nGive the control node's key with --key, or issue a new "
                         "generation to the new holders with `mesh rotate DIR CREDENTIAL`")
    return values


def _issue_credential(ledger: Ledger, mesh: Mesh, request: Request, entropy: Entropy,
                      notes: list[str], opened: dict[tuple[str, int], str]) -> Ledger:
    credential = ledger.credentials.get(request.id) or Credential()
    holders = sorted(request.holders)
    newest = credential.pending or credential.active
    if newest is not None and set(holders) == set(newest.sealed):
        return ledger  # satisfied already: never issued twice
    if credential.active is None:
        value = entropy()
        generation = Generation(generation=next_generation_number(credential),
                                slot=request.slot,
                                sealed=_sealed(mesh, holders, value),
                                escrow=_escrow(mesh, value))
        credential = attrs.evolve(credential, active=generation)
        notes.append(f"issued {request.id} generation {generation.generation}, sealed to "
                     f"{', '.join(holders)}")
    else:  # the holders changed: the same values, re-sealed; no new generation
        def sealed_for(generation: Generation, nodes: list[str]) -> PMap[str, str]:
            return _sealed(mesh, nodes, opened[(request.id, generation.generation)])

        credential = reseal(credential, holders, sealed_for)
        control = control_node(mesh)

        def escrowed(generation: Optional[Generation]) -> Optional[Generation]:
            """The generation with its value also in the control node's escrow, when it was
            opened here and the escrow lacks it."""
            if generation is None or not control or control in generation.escrow:
                return generation
            known = opened.get((request.id, generation.generation))
            if known is None:
                return generation
            return attrs.evolve(generation,
                                escrow=generation.escrow.update(_escrow(mesh, known)))

        credential = attrs.evolve(credential, active=escrowed(credential.active),
                                  pending=escrowed(credential.pending),
                                  retiring=escrowed(credential.retiring))
        notes.append(f"re-sealed {request.id} generation(s) "
                     f"{', '.join(str(g.generation) for g in _generations(credential))} to "
                     f"{', '.join(holders)} ({request.reason})")
    return attrs.evolve(ledger, credentials=ledger.credentials.set(request.id, credential))


def issue(requests: Sequence[Request], mesh: Mesh, ledger: Ledger, *,
          ca: Optional[MeshCa] = None, ca_loader: Optional[Callable[[], MeshCa]] = None,
          entropy: Entropy = new_secret, notes: Optional[list[str]] = None,
          now: Optional[str] = None, control_key: Optional[PrivateKey] = None) -> Ledger:
    """The ledger with every request issued. Credential requests are sealed to their holders;
    certificate requests are signed by `ca` (or the one `ca_loader` loads, only if needed).
    Without a CA, certificate requests are left standing with a note saying how to create it.
    A certificate request is honoured only while the pure rule still asks for it at `now`
    (default: the clock), so issuing the same requests twice signs nothing twice.
    A request whose credential is issued but sealed to other holders (a move) re-seals its
    values, opened with `control_key` (the control node's private key); see open_for_reseal."""
    notes = notes if notes is not None else []
    credential_requests = [r for r in requests if r.kind == "credential"]
    certificate_requests = [r for r in requests if r.kind == "certificate"]
    tls_requests = [r for r in requests if r.kind == TLS_REQUEST]
    check_keys(mesh, credential_requests + tls_requests)
    opened = open_for_reseal(mesh, ledger, credential_requests, control_key)
    for request in sorted(credential_requests):
        ledger = _issue_credential(ledger, mesh, request, entropy, notes, opened)
    if (certificate_requests or tls_requests or not ledger.ca) and ca is None \
            and ca_loader is not None:
        try:
            ca = ca_loader()
        except CaError as error:
            if certificate_requests or tls_requests:
                notes.append(f"certificates not issued: {error}")
    if ca is not None and ledger.ca != ca_pem(ca):
        ledger = attrs.evolve(ledger, ca=ca_pem(ca))
        notes.append("recorded the mesh CA's certificate (what every node's container runtime "
                     "trusts for the mesh's registry)")
    if tls_requests and ca is not None:
        moment = now or iso(utc_now())
        for request in sorted(tls_requests):
            ledger = _issue_tls(ledger, mesh, ca, request, moment, notes)
    if certificate_requests and ca is not None:
        moment = now or iso(utc_now())
        for request in sorted(certificate_requests):
            if certificate_reason(mesh, ledger, request.id, moment) is None:
                continue  # satisfied already (a kept certificate is never signed anew)
            certificate = sign_node(ca, mesh, request.id)
            ledger = attrs.evolve(ledger,
                                  certificates=ledger.certificates.set(request.id, certificate))
            notes.append(f"signed {request.id}'s certificate ({request.reason}), valid until "
                         f"{certificate.not_after}")
    return ledger


def _issue_tls(ledger: Ledger, mesh: Mesh, ca: MeshCa, request: Request, moment: str,
               notes: list[str]) -> Ledger:
    """A server certificate and a fresh key for an instance, the key sealed to its node (and
    the escrow) as the next generation of `tls/<instance>`; nothing when the rule keeps the
    one recorded (issuing twice signs nothing twice)."""
    if is_name_key(request.id):
        return _issue_name(ledger, mesh, ca, request, moment, notes)
    instance, (node,) = request.id, tuple(request.holders)
    if tls_reason(mesh, ledger, instance, node, moment) is None:
        return ledger
    return _sign_tls(ledger, mesh, ca, instance, node, request.reason, notes)


def _issue_name(ledger: Ledger, mesh: Mesh, ca: MeshCa, request: Request, moment: str,
                notes: list[str]) -> Ledger:
    """A web name's certificate (SAN the name) and a fresh key sealed to the nodes of the
    ingresses serving it, as the next generation of `tls/name:<name>`; nothing when the rule
    keeps the one recorded."""
    name, holders = name_of_key(request.id), sorted(request.holders)
    if name_reason(mesh, ledger, name, holders, moment) is None:
        return ledger
    return _sign_name(ledger, mesh, ca, name, holders, request.reason, notes)


def _sign_name(ledger: Ledger, mesh: Mesh, ca: MeshCa, name: str, holders: list[str],
               reason: str, notes: list[str]) -> Ledger:
    """Web name `name`'s certificate signed now with a fresh key, sealed to `holders` (the
    nodes of its ingresses) as the next generation of `tls/name:<name>`."""
    key_id = name_key(name)
    certificate, key_pem = sign_name(ca, mesh, name)
    cred_id = tls_credential(key_id)
    previous = ledger.credentials.get(cred_id) or Credential()
    number = next_generation_number(previous)
    generation = Generation(generation=number, sealed=_sealed(mesh, holders, key_pem),
                            escrow=_escrow(mesh, key_pem))
    del key_pem
    retired = previous.retired.extend(g.generation for g in _generations(previous))
    notes.append(f"signed the certificate of {name} ({reason}), valid until "
                 f"{certificate.not_after}; its key is {cred_id} generation {number}, sealed "
                 f"to {', '.join(holders)}")
    return attrs.evolve(ledger, tls=ledger.tls.set(key_id, certificate),
                        credentials=ledger.credentials.set(
                            cred_id, Credential(active=generation, retired=retired)))


def _sign_tls(ledger: Ledger, mesh: Mesh, ca: MeshCa, instance: str, node: str, reason: str,
              notes: list[str]) -> Ledger:
    """`instance`'s server certificate signed now with a fresh key, sealed to `node` as the
    next generation of `tls/<instance>` (the generations before it retired). A node's
    transfer certificate (`transfer:<node>`) is the same with clientAuth too: the node is
    the server of its departures and the client of its arrivals."""
    certificate, key_pem = sign_server(ca, mesh, instance, node,
                                       client=is_transfer_key(instance))
    cred_id = tls_credential(instance)
    previous = ledger.credentials.get(cred_id) or Credential()
    number = next_generation_number(previous)
    generation = Generation(generation=number,
                            sealed=_sealed(mesh, [node], key_pem),
                            escrow=_escrow(mesh, key_pem))
    del key_pem
    retired = previous.retired.extend(g.generation for g in _generations(previous))
    credential = Credential(active=generation, retired=retired)
    notes.append(f"signed {instance}'s server certificate for {certificate.address} "
                 f"({reason}), valid until {certificate.not_after}; its key is "
                 f"{cred_id} generation {number}, sealed to {node}")
    return attrs.evolve(ledger, tls=ledger.tls.set(instance, certificate),
                        credentials=ledger.credentials.set(cred_id, credential))


def select_credentials(ledger: Ledger, *, credential: Optional[str] = None,
                       provider: Optional[str] = None,
                       consumer: Optional[str] = None) -> list[str]:
    """The credential ids a rotation addresses: one credential; every credential a provider
    instance serves plus its own secrets; or every credential a consumer instance holds."""
    known = sorted(ledger.credentials)
    if credential is not None:
        if credential not in ledger.credentials:
            raise IssueError(f"no credential {credential} in the ledger; known: "
                             f"{', '.join(known) or 'none'}")
        return [credential]
    chosen = []
    for cred_id in known:
        parts = cred_id.split("/")
        if provider is not None and ((len(parts) == 3 and parts[1] == provider)
                                     or (parts[0] == "secret" and parts[1] == provider)):
            chosen.append(cred_id)
        if consumer is not None and len(parts) == 3 and parts[0] != "secret" \
                and parts[2] == consumer:
            chosen.append(cred_id)
    if not chosen:
        who = f"provider {provider}" if provider is not None else f"consumer {consumer}"
        raise IssueError(f"no credential in the ledger belongs to {who}")
    return chosen


def rotate(ledger: Ledger, credential_ids: Iterable[str], mesh: Mesh, *,
           entropy: Entropy = new_secret, server_held: Iterable[str] = ()) -> Ledger:
    """A new generation for each credential, sealed to the holders of its current one.
    `server_held`: the own secrets a provider's server holds (its admin), rotated provider
    first like a provider's credentials (resolver.rotation.server_held_credentials)."""
    server_held = frozenset(server_held)
    ids = sorted(set(credential_ids))
    refused = []
    for cred_id in ids:
        credential = ledger.credentials.get(cred_id)
        if is_tls_credential(cred_id):
            refused.append(f"{cred_id}: a TLS key is replaced only together with its "
                           "certificate (renewed inside ca.renew-before-days of expiry)")
        elif credential is None or credential.active is None:
            refused.append(f"{cred_id}: never issued (`mesh plan --issue` issues it)")
        elif (reason := in_progress(credential)) is not None:
            refused.append(f"{cred_id}: a rotation is in progress: {reason}")
    if refused:
        raise IssueError("cannot rotate:\n  " + "\n  ".join(refused))
    check_keys(mesh, [Request("credential", i, pvector(holder_nodes(ledger.credentials[i])))
                      for i in ids])
    for cred_id in ids:
        credential = ledger.credentials[cred_id]
        holders = holder_nodes(credential)
        value = entropy()
        sealed = _sealed(mesh, holders, value)
        ledger = attrs.evolve(ledger, credentials=ledger.credentials.set(
            cred_id, begin_rotation(cred_id, credential, sealed, _escrow(mesh, value),
                                    server_held=cred_id in server_held)))
    return ledger


def renew(ledger: Ledger, mesh: Mesh, ca: MeshCa, node: str,
          notes: Optional[list[str]] = None) -> Ledger:
    """An explicit renewal, whatever the windows: `node`'s certificate signed anew, and the
    server certificate of every instance on `node` that has one (the registry's, and every TLS
    server's: resolver/_tls.py), each with a
    fresh key sealed to `node` as the next generation of its `tls/<instance>`, and the
    certificate of every web name an ingress on `node` serves (its key sealed to the same
    ingress nodes as before: resolver/_names; none with mesh.yaml's `acme`), and `node`'s
    transfer certificate when the
    ledger holds one (resolver/_tls: `transfer:<node>`)."""
    if node not in mesh.nodes:
        raise IssueError(f"no node {node} in mesh.yaml; nodes: {', '.join(sorted(mesh.nodes))}")
    notes = notes if notes is not None else []
    ledger = attrs.evolve(ledger, certificates=ledger.certificates.set(node,
                                                                       sign_node(ca, mesh, node)))
    for instance in sorted(ledger.tls):
        described = mesh.instances.get(instance)
        if described is not None and described.node == node:
            ledger = _sign_tls(ledger, mesh, ca, instance, node, "renewed by mesh renew",
                               notes)
        elif instance == transfer_key(node):  # `node`'s transfer certificate (a move's)
            ledger = _sign_tls(ledger, mesh, ca, instance, node, "renewed by mesh renew",
                               notes)
        elif is_name_key(instance) and mesh.acme is None:  # a web name whose ingress runs
            # on `node` (with acme the ingress gets the names' certificates itself)
            key = ledger.credentials.get(tls_credential(instance))
            if key is not None and key.active is not None and node in key.active.sealed:
                ledger = _sign_name(ledger, mesh, ca, name_of_key(instance),
                                    sorted(key.active.sealed), "renewed by mesh renew", notes)
    return ledger


@attrs.frozen
class Renewal:
    """`mesh renew`: the node's certificates signed anew, and the mesh before and after."""

    node: str
    before: Resolution  # with the ledger as it was
    after: Resolution  # with the renewed certificates (its ledger is to be written)
    old: Optional[Certificate]  # the node certificate replaced (None: the node had none)
    new: Certificate  # the node certificate signed
    # (instance, certificate replaced, certificate signed) per server certificate renewed
    servers: tuple[tuple[str, Optional[Certificate], Certificate], ...] = ()
    notes: tuple[str, ...] = ()


def renewal(inputs: Inputs, node: str) -> Renewal:
    """Sign `node`'s certificates anew with the mesh CA of the mesh directory, whatever their
    renewal windows, and resolve the mesh before and after (nothing is written)."""
    ca = load_ca(inputs.mesh_dir, inputs.mesh)
    before = resolve_inputs(inputs)
    notes: list[str] = []
    ledger = renew(before.ledger, inputs.mesh, ca, node, notes)
    after = resolve_inputs(inputs, ledger)
    servers = tuple((instance, before.ledger.tls.get(instance), certificate)
                    for instance, certificate in sorted(ledger.tls.items())
                    if before.ledger.tls.get(instance) != certificate)
    return Renewal(node, before, after, inputs.ledger.certificates.get(node),
                   ledger.certificates[node], servers, tuple(notes))


def renew_in_ledger(mesh_dir: PathLike, node: str) -> Transacted[Renewal]:
    """`mesh renew`: renewal in one ledger transaction; the renewed ledger is kept."""

    def compute(inputs: Inputs) -> tuple[Ledger, Renewal]:
        renewed = renewal(inputs, node)
        return renewed.after.ledger, renewed

    return transact(mesh_dir, compute)


def issue_requests(inputs: Inputs, resolution: Resolution, *, notes: Optional[list[str]] = None,
                   entropy: Entropy = new_secret,
                   control_key: Optional[PrivateKey] = None) -> Ledger:
    """For `mesh plan --issue`: the resolution's new ledger with its requests issued, the CA
    loaded from the mesh directory only when a certificate is requested."""
    return issue(list(resolution.requests), inputs.mesh, resolution.ledger,
                 ca_loader=lambda: load_ca(inputs.mesh_dir, inputs.mesh),
                 entropy=entropy, notes=notes, control_key=control_key)
