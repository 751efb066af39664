"""What a plan says changes, container by container (resolver/_plan.py), between two resolutions
of a mesh and the same mesh edited: an image re-pinned, a credential rotated, an env value, a
health check or a port changed, an instance removed or added.

A container is created when it is new, removed when it is gone, recreated exactly when any
part of its definition differs (its environment is fixed at creation), and otherwise not
mentioned; every recreate names each cause: `image A → B`, `env KEY`, `secret ID generation
X → Y`, and the other fields by name. Written from the module's stated rules.
"""

from __future__ import annotations

import attrs
from hypothesis import given
from hypothesis import strategies as st
from pyrsistent import pmap, pvector

from resolver import Credential, Generation, Health, Instance, resolve
from resolver import container_changes

from .strategies import digest_of
from .strategies_meshes import meshes

EDITS = ["re-pin", "rotate", "issue", "env", "forget-secret", "health", "port", "remove", "add",
         "command", "mount", "run-once"]


def edited(world, edits, data):
    catalogue, mesh, ledger = world.catalogue, world.mesh, world.ledger
    modules = dict(catalogue.modules)
    names = sorted({i.module for i in mesh.instances.values() if i.module in modules}) or \
        sorted(modules)  # edits of modules that run
    for edit in edits:
        module = modules[data.draw(st.sampled_from(names))]
        if edit == "re-pin" and ledger.pins:
            key = data.draw(st.sampled_from(sorted(ledger.pins)))
            ledger = attrs.evolve(ledger, pins=ledger.pins.set(key, digest_of(key + " again")))
        elif edit == "rotate" and ledger.credentials:
            cred_id = data.draw(st.sampled_from(sorted(ledger.credentials)))
            cred = ledger.credentials[cred_id]
            bumped = attrs.evolve(cred.active, generation=cred.active.generation + 7)
            ledger = attrs.evolve(ledger, credentials=ledger.credentials.set(
                cred_id, attrs.evolve(cred, active=bumped)))
        elif edit == "issue":  # credentials the first resolution asked for, issued now
            asked = sorted({r.id for r in resolve(catalogue, mesh, ledger).requests
                            if r.kind == "credential" and r.id not in ledger.credentials})
            for cred_id in asked[:data.draw(st.integers(1, 3))]:
                ledger = attrs.evolve(ledger, credentials=ledger.credentials.set(
                    cred_id, Credential(active=Generation(1, None, pmap({"anchor": "s"})))))
        elif edit in ("env", "forget-secret", "health", "command", "mount", "run-once") \
                and module.containers:
            holding = [i for i, c in enumerate(module.containers)
                       if any("password}" in v for v in c.env.values())]
            index = data.draw(st.sampled_from(holding) if edit == "forget-secret" and holding
                              else st.integers(0, len(module.containers) - 1))
            container = module.containers[index]
            if edit == "env":
                container = attrs.evolve(container, env=container.env.set("EDITED", "yes"))
            elif edit == "forget-secret":  # the container no longer uses its passwords
                container = attrs.evolve(container, env=pmap(
                    {k: v for k, v in container.env.items() if "password}" not in v}))
            elif edit == "health":
                container = attrs.evolve(container, health=Health(command=pvector(["edited"])))
            elif edit == "run-once":
                container = attrs.evolve(container, run_once=not container.run_once)
            elif edit == "command":
                container = attrs.evolve(container, command=pvector(["edited", "--now"]))
            else:
                container = attrs.evolve(container, mounts=pvector())
            modules[module.name] = attrs.evolve(
                module, containers=module.containers.set(index, container))
        elif edit == "port" and module.listens:
            listen_name = data.draw(st.sampled_from(sorted(module.listens)))
            listen = module.listens[listen_name]
            modules[module.name] = attrs.evolve(module, listens=module.listens.set(
                listen_name, attrs.evolve(listen, port=listen.port + 1)))
        elif edit == "remove" and mesh.instances:
            gone = data.draw(st.sampled_from(sorted(mesh.instances)))
            mesh = attrs.evolve(mesh, instances=mesh.instances.remove(gone))
        elif edit == "add":
            node = data.draw(st.sampled_from(sorted(mesh.nodes)))
            mesh = attrs.evolve(mesh, instances=mesh.instances.set(
                f"{module.name}-new@{node}", Instance(module=module.name, node=node)))
    return attrs.evolve(world, catalogue=attrs.evolve(catalogue, modules=pmap(modules)),
                        mesh=mesh, ledger=ledger)


def server_admin(declaration, container) -> set:
    """The provider admin secrets this container's server holds (DESIGN: the provisioner puts
    a new generation in force on the running server; the container only reads it when it
    initialises an empty data directory)."""
    published = {p.listen for p in container.ports}
    return {p.admin.credential for p in declaration.providers
            if p.admin is not None and p.instance == container.instance
            and p.listen in published}


def causes(old, new, held=frozenset()) -> list[str]:
    found = []
    if old.image != new.image:
        found.append(f"image {old.image} → {new.image}")
    found += [f"env {k}" for k in sorted(set(old.env) | set(new.env))
              if old.env.get(k) != new.env.get(k)]
    before = {s.credential: s.generation for s in old.secrets}
    after = {s.credential: s.generation for s in new.secrets}

    def shown(generation):
        return "pending" if generation is None else generation

    for cred in sorted(set(before) | set(after)):
        if cred in held and "none" not in (before.get(cred, "none"), after.get(cred, "none")):
            continue  # stated apart: in place
        if before.get(cred, "none") != after.get(cred, "none"):
            found.append(f"secret {cred} generation {shown(before.get(cred, 'none'))} → "
                         f"{shown(after.get(cred, 'none'))}")
    for field in ("command", "ports", "mounts", "run_once", "health", "labels", "mac"):
        if getattr(old, field) != getattr(new, field):
            found.append(field.replace("_", "-"))
    return found


@given(meshes(), st.lists(st.sampled_from(EDITS), min_size=1, max_size=3), st.data())
def test_every_container_that_changes_is_named_with_its_causes(world, edits, data):
    first = resolve(world.catalogue, world.mesh, world.ledger)
    later = edited(world, edits, data)
    second = resolve(later.catalogue, later.mesh, later.ledger)
    expected = []
    for node in sorted(set(first.declarations) | set(second.declarations)):
        old = {c.name: c for c in first.declarations[node].containers} \
            if node in first.declarations else {}
        new = {c.name: c for c in second.declarations[node].containers} \
            if node in second.declarations else {}
        for name in sorted(set(old) | set(new)):
            if name not in old:
                expected.append((node, name, new[name].instance, "create", ()))
            elif name not in new:
                expected.append((node, name, old[name].instance, "remove", ()))
            elif old[name] != new[name]:
                held = server_admin(first.declarations[node], old[name]) & \
                    server_admin(second.declarations[node], new[name])
                why = causes(old[name], new[name], held)
                if why:
                    expected.append((node, name, new[name].instance, "recreate", tuple(why)))
                    continue
                was = {s.credential: s.generation for s in old[name].secrets}
                now = {s.credential: s.generation for s in new[name].secrets}
                moved = tuple(f"secret {c} generation {was[c]} → {now[c]} is in force on the "
                              f"running server; only the file it reads it from (env or "
                              f"secret file) is rewritten"
                              for c in sorted(held) if c in was and c in now and was[c] != now[c])
                if moved:
                    expected.append((node, name, new[name].instance, "in-place", moved))
    got = [(c.node, c.container, c.instance, c.action, tuple(c.causes))
           for c in container_changes(first.declarations, second.declarations)]
    assert got == expected
    assert all(c[4] for c in got if c[3] == "recreate"), "a recreate names its causes"
    assert container_changes(second.declarations, second.declarations) == []
