"""Secrets as files: moving a secret from a container's env into a secret file changes where the
container is told it, and nothing else.

On whole meshes with every credential issued, a drawn set of env values that refer to a
password (`${<as>.password}`, `${self.<secret>.password}`) is moved into `secret-files:` (the
value becomes the file's content, the variable `<KEY>_FILE` names its path). Resolving both
catalogues, each container of the second:
- holds the first's env without the moved keys, plus each `<KEY>_FILE` set to its file's path;
- declares one file per moved key whose content is exactly what the first's env value was
  (the same `${secret:…}` tokens: never a value), mode 0400, in /run/secrets;
- refers to exactly the same credentials at the same generations, so a rotation recreates it
  as it did (the generation stays in its declaration, and so in its config digest);
whatever the moved value said (a credential's token, or "" for an unbound optional
requirement).
"""

from __future__ import annotations

import attrs
from hypothesis import given, note
from hypothesis import strategies as st
from pyrsistent import pmap, pvector

from resolver import SecretFile, resolve
from resolver.rendering import SECRETS_DIR, secret_tokens

from .strategies_meshes import meshes
from .test_rotation_flow_props import issued


def _moved(module, chosen):
    """`module` with the env keys `chosen` ((container, key) pairs) moved into secret files."""
    containers = []
    for container in module.containers:
        keys = sorted(k for c, k in chosen if c == container.name)
        if not keys:
            containers.append(container)
            continue
        env = {k: v for k, v in container.env.items() if k not in keys}
        files = [SecretFile(path=f"{SECRETS_DIR}/{k.lower()}", content=container.env[k],
                            env=f"{k}_FILE", owner="1000:1000") for k in keys]
        containers.append(attrs.evolve(container, env=pmap(env), secret_files=pvector(files)))
    return attrs.evolve(module, containers=pvector(containers))


@given(meshes(bad=False), st.data())
def test_a_secret_moved_into_a_file_is_told_there_and_nowhere_else(world, data):
    ledger = issued(world)
    candidates = sorted((m.name, c.name, k) for m in world.catalogue.modules.values()
                        for c in m.containers for k, v in c.env.items() if ".password}" in v)
    if not candidates:
        return
    chosen = data.draw(st.lists(st.sampled_from(candidates), min_size=1, unique=True))
    note(f"moved: {chosen}")
    modules = dict(world.catalogue.modules)
    for name in {m for m, _, _ in chosen}:
        modules[name] = _moved(modules[name], {(c, k) for m, c, k in chosen if m == name})
    catalogue = attrs.evolve(world.catalogue, modules=pmap(modules))

    before = resolve(world.catalogue, world.mesh, ledger)
    after = resolve(catalogue, world.mesh, ledger)
    assert sorted(before.declarations) == sorted(after.declarations)
    moved_containers = 0
    for node, declaration in after.declarations.items():
        old = {c.name: c for c in before.declarations[node].containers}
        for container in declaration.containers:
            was = old[container.name]
            module = world.mesh.instances[container.instance].module
            keys = sorted(k for m, c, k in chosen
                          if m == module and c == container.container)
            expected_env = {k: v for k, v in was.env.items() if k not in keys}
            expected_env.update({f"{k}_FILE": f"{SECRETS_DIR}/{k.lower()}" for k in keys})
            assert dict(container.env) == expected_env
            files = {f.path: f for f in container.secret_files}
            assert sorted(files) == sorted(f"{SECRETS_DIR}/{k.lower()}" for k in keys)
            for k in keys:
                told = files[f"{SECRETS_DIR}/{k.lower()}"]
                assert told.content == was.env[k]  # the same tokens, never a value
                assert (told.mode, told.owner) == ("0400", "1000:1000")
            assert list(container.secrets) == list(was.secrets)  # same refs, same generations
            if keys and any(secret_tokens(was.env[k]) for k in keys):
                moved_containers += 1  # a credential now told by file only
    note(f"containers told a credential by file: {moved_containers}")
