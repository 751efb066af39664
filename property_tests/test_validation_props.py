"""The loader accepts what is valid and refuses each mistake where it was made.

- Valid documents (the catalogues, meshes and ledgers of strategies_meshes) written as YAML
  load back equal, with no fault; loaded as a whole mesh they resolve exactly as the models
  they were written from.
- One mistake, of any kind the validator knows (DEFECTS: a table written from docs/schema.md
  and the validator's rules, one entry per rule), made in a valid document: loading refuses
  it with a fault that names the file and points into the entry that holds the mistake.
- A mistake the types catch (a string where a port goes) and one only the validator catches
  in the same document are both reported: one run shows every fault.
"""

from __future__ import annotations

import copy

import attrs
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from resolver import (
    InputError,
    Module,
    load_inputs,
    resolve,
)
from resolver.documents import (
    dump_ledger,
    dump_yaml,
    load_ledger,
    load_mesh,
    load_module,
    load_provisions,
    structure,
    unstructure,
)

from .strategies_meshes import meshes

T = "zq"  # the mark of the entry that holds the mistake (no valid document spells it)


def container(d, **fields):
    """A new container named T holding the mistake."""
    d.setdefault("artifacts", {}).setdefault("img", {"repository": "example.org/img", "tag": "1"})
    d.setdefault("containers", []).append({"name": T, "artifact": "img", **fields})


def listen(d, **fields):
    d.setdefault("listens", {})[T] = {"port": 8080, **fields}


def artifact(d, **fields):
    d.setdefault("artifacts", {})[T] = fields


def requirement(d, **fields):
    d.setdefault("requires", []).append({"as": T, **fields})


def state(d, **fields):
    d.setdefault("state", {})[T] = {"path": "x/data", **fields}


def access(d, **fields):
    d.setdefault("accesses", {})[T] = {"path": "/srv/x", **fields}


def env(d, value, key="VALUE"):
    container(d, env={key: value})


def mount(d, **fields):
    d.setdefault("state", {}).setdefault("st", {"path": "st"})
    container(d, mounts=[{"target": "/" + T, **fields}])


def health(d, **fields):
    d.setdefault("listens", {}).setdefault("http", {"port": 8080})
    container(d, health=fields)


MODULE_DEFECTS = {
    "artifact with image and build": lambda d: artifact(d, repository="r", tag="1", build="."),
    "artifact without tag": lambda d: artifact(d, repository="r"),
    "artifact without repository": lambda d: artifact(d, tag="1"),
    "artifact naming nothing": lambda d: artifact(d, mirror=False),
    "base of an upstream artifact": lambda d: artifact(d, repository="r", tag="1", base=["img"]),
    "base naming no artifact": lambda d: artifact(d, build=".", base=["nothing"]),
    "artifact built from itself": lambda d: artifact(d, build=".", base=[T]),
    "listen name with a dot": lambda d: d.setdefault("listens", {}).update(
        {T + ".x": {"port": 80}}),
    "listen port zero": lambda d: listen(d, port=0),
    "listen port too high": lambda d: listen(d, port=65536),
    "fixed port too high": lambda d: listen(d, fixed=70000),
    "listen protocol": lambda d: listen(d, protocol="sctp"),
    "listen served by no container": lambda d: listen(d, container="nobody"),
    "provide through no listen": lambda d: d.setdefault("provides", []).append(
        {"provision": T, "listen": "nowhere"}),
    "provide with no such admin": lambda d: (listen(d), d.setdefault("provides", []).append(
        {"provision": T, "listen": T, "admin": "nobody"})),
    "requirement name with a dot": lambda d: d.setdefault("requires", []).append(
        {"as": T + ".x", "provision": "p"}),
    "requirement named self": lambda d: d.setdefault("requires", []).append(
        {"as": "self", "provision": T}),
    "requirement named twice": lambda d: (requirement(d, provision="a"),
                                          requirement(d, provision="b")),
    "requirement of two things": lambda d: requirement(d, provision="p", module="m"),
    "requirement of nothing": lambda d: requirement(d),
    "listen without module": lambda d: requirement(d, provision="p", listen="http"),
    "requirement of no part": lambda d: requirement(d, provision="p", part="nopart"),
    "secret name with a dot": lambda d: d.update(secrets=[T + ".x"]),
    "secret declared twice": lambda d: d.update(secrets=[T, T]),
    "state owner": lambda d: state(d, owner="root"),
    "state mode": lambda d: state(d, mode="rwx"),
    "state path with ..": lambda d: state(d, path="../" + T),
    "state path empty": lambda d: state(d, path="/"),
    "access mode": lambda d: access(d, mode="wx"),
    "access path relative": lambda d: access(d, path="srv/" + T),
    "container name with a dot": lambda d: (container(d), d["containers"][-1].update(
        name=T + ".x")),
    "container declared twice": lambda d: (container(d), container(d)),
    "container of no artifact": lambda d: d.setdefault("containers", []).append(
        {"name": T, "artifact": "noimage"}),
    "container of no part": lambda d: container(d, part="nopart"),
    "mount of two kinds": lambda d: (d.update(facilities=["f"]),
                                     mount(d, state="st", facility="f")),
    "mount of nothing": lambda d: mount(d),
    "mount target relative": lambda d: (d.setdefault("state", {}).update({"st": {"path": "st"}}),
                                        container(d, mounts=[{"target": T, "state": "st"}])),
    "mount of an undeclared state": lambda d: mount(d, state="nostate"),
    "mount of an undeclared access": lambda d: mount(d, access="noaccess"),
    "mount of an undeclared facility": lambda d: mount(d, facility="nofacility"),
    "mount of an undeclared binding": lambda d: mount(d, binding="nobinding"),
    "binding file inside a state mount": lambda d: (
        d.setdefault("requires", []).append({"as": "zz9", "module": "zz9mod"}),
        d.setdefault("state", {}).update({"st": {"path": "st"}}),
        container(d, mounts=[{"target": "/srv", "state": "st"},
                             {"binding": "zz9", "target": "/srv/zz9.env"}])),
    "format without binding": lambda d: mount(d, state="st", format="json"),
    "health of two kinds": lambda d: health(d, tcp="http", command=["true"]),
    "health of nothing": lambda d: health(d, timeout=5),
    "health tcp of no listen": lambda d: health(d, tcp="nolisten"),
    "health http of no listen": lambda d: health(d, http={"listen": "nolisten"}),
    "health http path": lambda d: health(d, http={"listen": "http", "path": "healthz"}),
    "health command empty": lambda d: health(d, command=[]),
    "health timeout zero": lambda d: health(d, command=["true"], timeout=0),
    "env name": lambda d: container(d, env={"1BAD": "x"}),
    "env placeholder unclosed": lambda d: env(d, "${db.host"),
    "env placeholder of no requirement": lambda d: env(d, "${nothing.host}"),
    "env placeholder of no binding value": lambda d: (
        d.setdefault("requires", []).append({"as": "rq", "provision": "p"}),
        env(d, "${rq.colour}")),
    "env placeholder of no secret": lambda d: env(d, "${self.nosecret.password}"),
    "env placeholder of no listen": lambda d: env(d, "${self.nolisten.port}"),
    "env placeholder of self": lambda d: env(d, "${self.colour}"),
    "env placeholder of three parts": lambda d: env(d, "${a.b.c}"),
    "module name": lambda d: d.update(name=T + " x"),
    "unknown key": lambda d: d.setdefault("listens", {}).update({T: {"port": 80, "colour": 1}}),
    "a string for a port": lambda d: listen(d, port="eighty"),
    "a number for a name": lambda d: container(d, command=[1]),
}

def listing(names) -> str:
    names = sorted(set(names))
    return ", ".join(names) if names else "(none declared)"


PLAIN_NAME = "letters, digits, '-' and '_' (starting with a letter or digit)"
EXPECTED = {  # what a fault says was expected, for the mistakes that have one answer
    "provide through no listen": lambda d: "one of " + listing(d.get("listens", {})),
    "provide with no such admin": lambda d: "one of " + listing(d.get("secrets", [])),
    "requirement of no part": lambda d: "one of " + listing(d.get("parts", {})),
    "container of no artifact": lambda d: "one of " + listing(d.get("artifacts", {})),
    "container of no part": lambda d: "one of " + listing(d.get("parts", {})),
    "mount of an undeclared state":
        lambda d: "one of the module's state: " + listing(d.get("state", {})),
    "mount of an undeclared access":
        lambda d: "one of the module's accesses: " + listing(d.get("accesses", {})),
    "mount of an undeclared facility":
        lambda d: "one of the module's facilities: " + listing(d.get("facilities", [])),
    "health tcp of no listen": lambda d: "one of " + listing(d.get("listens", {})),
    "health http of no listen": lambda d: "one of " + listing(d.get("listens", {})),
    "listen served by no container":
        lambda d: "one of " + listing(c["name"] for c in d.get("containers", [])),
    "base naming no artifact":
        lambda d: "one of " + listing(d.get("artifacts", {})) + " or module/artifact",
    "listen port zero": lambda d: "a port from 1 to 65535",
    "listen port too high": lambda d: "a port from 1 to 65535",
    "fixed port too high": lambda d: "a port from 1 to 65535",
    "listen protocol": lambda d: "one of tcp, udp",
    "access mode": lambda d: "one of ro, rw",
    "module name": lambda d: PLAIN_NAME,
    "listen name with a dot": lambda d: PLAIN_NAME,
    "requirement name with a dot": lambda d: PLAIN_NAME,
    "container name with a dot": lambda d: PLAIN_NAME,
    "secret name with a dot": lambda d: PLAIN_NAME,
    "state owner": lambda d: 'numeric "uid:gid", e.g. "999:999"',
    "state mode": lambda d: 'an octal string such as "0750"',
    "requirement of two things": lambda d: "exactly one of provision, module",
    "requirement of nothing": lambda d: "exactly one of provision, module",
    "mount of two kinds": lambda d: "exactly one of state, access, facility, binding, ca: true",
    "binding file inside a state mount": lambda d: "a target outside every other mount's target",
    "mount of nothing": lambda d: "exactly one of state, access, facility, binding, ca: true",
    "health of two kinds": lambda d: "exactly one of command, tcp, http",
    "health of nothing": lambda d: "exactly one of command, tcp, http",
    "health timeout zero": lambda d: "at least 1 second",
    "artifact built from itself": lambda d: "another artifact",
    "requirement named twice": lambda d: "a unique `as`",
    "secret declared twice": lambda d: "each secret once",
    "container declared twice": lambda d: "unique container names",
}

MESH_DEFECTS = {
    "node name with a dot": lambda d: d["nodes"].update({T + ".x": {"address": "10.9.9.9"}}),
    "node address": lambda d: d["nodes"].update({T: {"address": "ten"}}),
    "ssh port": lambda d: d["nodes"].update({T: {"address": "10.9.9.9", "ssh-port": 0}}),
    "public key": lambda d: d["nodes"].update({T: {"address": "10.9.9.9", "public-key": "abc"}}),
    "facility listed twice": lambda d: d["nodes"].update(
        {T: {"address": "10.9.9.9", "facilities": ["gpu", "gpu"]}}),
    "second control node": lambda d: d["nodes"].update(  # the first node is the control node
        {T: {"address": "10.9.9.9", "control": True}}),
    "instance name": lambda d: d.setdefault("instances", {}).update(
        {T + " x": {"module": "m", "node": "n"}}),
    "state-from and fresh": lambda d: d.setdefault("instances", {}).update(
        {T: {"module": "m", "node": "n", "state-from": "n0", "fresh": True}}),
    "exposure source not an address": lambda d: d.setdefault("instances", {}).update(
        {T: {"module": "m", "node": "n", "expose": {"main": {"to": ["ten.0.0.1"]}}}}),
    "exposure source with host bits": lambda d: d.setdefault("instances", {}).update(
        {T: {"module": "m", "node": "n", "expose": {"main": {"to": ["10.0.0.1/24"]}}}}),
    "host ports below the floor": lambda d: d.update({"host-ports": {"first": 80,
                                                                      "last": 20999}}),
    "host ports backwards": lambda d: d.update({"host-ports": {"first": 21000, "last": 20000}}),
    "floor port": lambda d: d.update(floors=[{"port": 0, "reason": T}]),
    "floor protocol": lambda d: d.update(floors=[{"port": 25, "protocol": "sctp", "reason": T}]),
    "floor sources": lambda d: d.update(floors=[{"port": 25, "sources": "all", "reason": T}]),
    "ca validity": lambda d: d.update(ca={"path": T, "validity-days": 0}),
    "ca renewal": lambda d: d.update(ca={"path": T, "validity-days": 10,
                                         "renew-before-days": 10}),
    "unknown key": lambda d: d["nodes"].update({T: {"address": "10.9.9.9", "colour": "red"}}),
    "a string for a port": lambda d: d["nodes"].update({T: {"address": "10.9.9.9",
                                                            "ssh-port": "22"}}),
}

PROVISION_DEFECTS = {
    "provision name": lambda d: d.update({T + ".x": {}}),
    "scope": lambda d: d.update({T: {"scope": "planet"}}),
    "grant": lambda d: d.update({T: {"grant": "everything"}}),
    "key": lambda d: d.update({T: {"keys": ["host", "colour"]}}),
    "key listed twice": lambda d: d.update({T: {"keys": ["host", "host"]}}),
    "url field not a key": lambda d: d.update({T: {"keys": ["host"], "url": "x://{port}"}}),
    "url field url": lambda d: d.update({T: {"keys": ["host", "url"], "url": "x://{url}"}}),
}

LEDGER_DEFECTS = {
    "port": lambda d: d.setdefault("ports", {}).update({T: {"l": {"node": "n", "port": 0}}}),
    "generation": lambda d: d.setdefault("credentials", {}).update(
        {T: {"active": {"generation": 0}}}),
    "slot": lambda d: d.setdefault("credentials", {}).update(
        {T: {"active": {"generation": 1, "slot": "c"}}}),
    "pin": lambda d: d.setdefault("pins", {}).update({T: "sha256:short"}),
    "login shared": lambda d: d.setdefault("logins", {}).update(
        {"amqp/lavinmq@anchor/old-app@anchor": "old_app_1", T: "old_app_1"}),
    "version": lambda d: d.update(version=2),
}


def _raw(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _extent(lines: list[str], start: int) -> set[int]:
    """The 1-based lines of the entry starting at `start` (a list item or a key): the lines
    indented more, and the items of a list written at the key's own indentation."""
    found, top = {start + 1}, _raw(lines[start])
    for j in range(start + 1, len(lines)):
        if _raw(lines[j]) > top or (_raw(lines[j]) == top and lines[j].lstrip().startswith("- ")
                                    and not lines[start].lstrip().startswith("- ")):
            found.add(j + 1)
        else:
            break
    return found


def block(text: str) -> set[int]:
    """The 1-based lines of the entries marked T: a mark that begins a list item or is a key
    marks that entry; a mark in a `key: value` line marks the entry holding that line."""
    lines = text.splitlines()
    found: set[int] = set()
    for i, line in enumerate(lines):
        if T not in line:
            continue
        start = i
        if not line.lstrip().startswith("- ") and not line.rstrip().endswith(":"):
            start = next((j for j in range(i - 1, -1, -1) if _raw(lines[j]) < _raw(line)), i)
        found |= _extent(lines, start)
    return found


POINT = {  # the key a fault must point at (its line), for mistakes in one scalar value
    "module": {
        "listen port zero": "port", "listen port too high": "port", "fixed port too high": "fixed",
        "listen protocol": "protocol", "listen served by no container": "container",
        "provide through no listen": "listen", "provide with no such admin": "admin",
        "requirement name with a dot": "as", "requirement named self": "as",
        "requirement named twice": "as", "listen without module": "listen",
        "requirement of no part": "part", "state owner": "owner", "state mode": "mode",
        "state path with ..": "path", "state path empty": "path", "access mode": "mode",
        "access path relative": "path", "container name with a dot": "name",
        "container declared twice": "name", "container of no artifact": "artifact",
        "container of no part": "part", "mount target relative": "target",
        "mount of an undeclared state": "state", "mount of an undeclared access": "access",
        "mount of an undeclared facility": "facility", "health tcp of no listen": "tcp",
        "mount of an undeclared binding": "binding",
        "binding file inside a state mount": "target", "format without binding": "format",
        "health http of no listen": "listen", "health http path": "path",
        "health command empty": "command", "health timeout zero": "timeout",
        "module name": "name", "env name": "1BAD", "env placeholder unclosed": "VALUE",
        "env placeholder of no requirement": "VALUE", "env placeholder of self": "VALUE",
        "env placeholder of no binding value": "VALUE", "env placeholder of no secret": "VALUE",
        "env placeholder of no listen": "VALUE", "env placeholder of three parts": "VALUE",
        "a string for a port": "port", "unknown key": "colour"},
    "mesh": {
        "ssh port": "ssh-port", "node address": "address", "public key": "public-key",
        "second control node": "control", "state-from and fresh": "fresh",
        "host ports below the floor": "first",
        "floor port": "port", "floor protocol": "protocol", "floor sources": "sources",
        "ca validity": "validity-days", "ca renewal": "renew-before-days",
        "unknown key": "colour", "a string for a port": "ssh-port"},
    "provisions": {"scope": "scope", "grant": "grant", "url field not a key": "url",
                   "url field url": "url"},
    "ledger": {"port": "port", "generation": "generation", "slot": "slot", "pin": T,
               "login shared": T},
}


AT_THE_KEY = {  # a reference (or a name that is a key) is pointed at by its key, not its value
    "listen served by no container", "provide through no listen", "provide with no such admin",
    "requirement named self", "requirement named twice", "listen without module",
    "requirement of no part", "container of no artifact", "container of no part",
    "mount of an undeclared state", "mount of an undeclared access",
    "mount of an undeclared facility", "health tcp of no listen", "health http of no listen",
    "mount of an undeclared binding", "format without binding",
    "env name", "env placeholder unclosed", "env placeholder of no requirement",
    "env placeholder of self", "env placeholder of no binding value",
    "env placeholder of no secret", "env placeholder of no listen",
    "env placeholder of three parts", "unknown key", "second control node",
    "state-from and fresh",
}


def assert_refused_there(load, text: str, file: str, point: str = None, kind: str = ""):
    """Refused, every fault located in `file`, one inside the entry marked T and, when the
    mistake is one value, at the line of its key `point`."""
    with pytest.raises(InputError) as raised:
        load(text, file)
    faults = raised.value.faults
    note("\n".join(map(str, faults)))
    assert all(f.file == file and f.line >= 1 for f in faults)
    if T in text:
        lines = block(text)
        inside = [f for f in faults if f.line in lines]
        assert inside, f"no fault points into lines {sorted(lines)}: {[str(f) for f in faults]}"
        if point is not None:  # at the key itself, or at its value: exactly
            said = text.splitlines()

            def column(f):
                line = said[f.line - 1]
                if not line.lstrip(" -").startswith(f"{point}:"):
                    return None
                at = line.index(f"{point}:") + 1
                return at if kind in AT_THE_KEY else at + len(point) + 2

            assert any(f.col == column(f) for f in inside), \
                f"no fault points at {point} ({kind}): {[str(f) for f in inside]}"
    return faults


@given(meshes(), st.data())
def test_a_mistake_in_a_module_is_refused_where_it_was_made(world, data):
    module = data.draw(st.sampled_from(sorted(world.catalogue.modules.values(),
                                              key=lambda m: m.name)))
    kinds = data.draw(st.permutations(sorted(MODULE_DEFECTS)))[:8]  # every rule, over a run
    for kind in kinds:
        plain = copy.deepcopy(unstructure(module))
        MODULE_DEFECTS[kind](plain)
        note(kind)
        faults = assert_refused_there(load_module, dump_yaml(plain), "catalogue/m/module.yaml",
                                      POINT["module"].get(kind), kind)
        if kind in EXPECTED:
            wanted = EXPECTED[kind](plain)
            assert wanted in {f.expected for f in faults}, (wanted, [str(f) for f in faults])


@given(meshes(), st.data())
def test_a_mistake_in_mesh_yaml_provisions_or_the_ledger_is_refused_where_it_was_made(
        world, data):
    for kind in data.draw(st.permutations(sorted(MESH_DEFECTS)))[:4]:
        plain = copy.deepcopy(unstructure(world.mesh))
        MESH_DEFECTS[kind](plain)
        note(f"mesh: {kind}")
        assert_refused_there(load_mesh, dump_yaml(plain), "mesh.yaml", POINT["mesh"].get(kind),
                             kind)
    for kind in data.draw(st.permutations(sorted(PROVISION_DEFECTS)))[:2]:
        plain = copy.deepcopy(unstructure(world.catalogue.provisions))
        PROVISION_DEFECTS[kind](plain)
        note(f"provisions: {kind}")
        assert_refused_there(load_provisions, dump_yaml(plain), "provisions.yaml",
                             POINT["provisions"].get(kind), kind)
    for kind in data.draw(st.permutations(sorted(LEDGER_DEFECTS)))[:2]:
        plain = copy.deepcopy(unstructure(world.ledger))
        plain.pop("version", None)
        LEDGER_DEFECTS[kind](plain)
        note(f"ledger: {kind}")
        text = dump_yaml({"version": plain.pop("version", 1), **plain})
        assert_refused_there(load_ledger, text, "ledger.yaml", POINT["ledger"].get(kind), kind)


@given(meshes(), st.data())
def test_a_type_mistake_and_a_rule_mistake_are_both_reported(world, data):
    module = data.draw(st.sampled_from(sorted(world.catalogue.modules.values(),
                                              key=lambda m: m.name)))
    plain = copy.deepcopy(unstructure(module))
    kind = data.draw(st.sampled_from([k for k in sorted(MODULE_DEFECTS)
                                      if k not in ("unknown key", "a string for a port",
                                                   "a number for a name")]))
    MODULE_DEFECTS[kind](plain)
    # only the types say so: in a mapping's entry, or in an item of a list (run-once, a bool)
    unmarked = [c for c in plain.get("containers") or [] if T not in repr(c)]
    if unmarked and data.draw(st.booleans()):
        unmarked[0]["run-once"] = "eighty"
    else:
        plain.setdefault("listens", {})["typo"] = {"port": "eighty"}
    note(kind)
    text = dump_yaml(plain)
    with pytest.raises(InputError) as raised:
        load_module(text, "m.yaml")
    lines = text.splitlines()
    typo = next(i for i, line in enumerate(lines) if "eighty" in line) + 1
    faults = raised.value.faults
    note("\n".join(map(str, faults)))
    assert any(f.line == typo for f in faults), "the type mistake is reported"
    mark = block(text)
    assert any(f.line in mark for f in faults), "so is the mistake only the validator sees"


# --------------------------------------------------------------------------- valid documents


@given(meshes())
def test_valid_documents_load_back_equal_and_resolve_the_same(world):
    documents = {"mesh": (dump_yaml(unstructure(world.mesh)), "mesh.yaml"),
                 "provisions": (dump_yaml(unstructure(world.catalogue.provisions)),
                                "catalogue/provisions.yaml"),
                 "ledger": (dump_ledger(world.ledger), "ledger.yaml")}
    for name, module in world.catalogue.modules.items():
        text = dump_yaml(unstructure(module))
        assert load_module(text, f"{name}.yaml", name=name)[0] == module
        documents[f"module:{name}"] = (text, f"catalogue/{name}/module.yaml")
    assert load_mesh(*documents["mesh"])[0] == world.mesh
    assert load_ledger(*documents["ledger"])[0] == world.ledger
    assert load_provisions(*documents["provisions"])[0].provisions == world.catalogue.provisions
    inputs = load_inputs(documents)
    assert (inputs.catalogue, inputs.mesh, inputs.ledger) == (world.catalogue, world.mesh,
                                                              world.ledger)
    loaded = resolve(inputs.catalogue, inputs.mesh, inputs.ledger, sources=inputs.sources)
    direct = resolve(world.catalogue, world.mesh, world.ledger)
    assert loaded.declarations == direct.declarations
    assert loaded.bindings == direct.bindings
    assert loaded.ledger == direct.ledger
    assert [(p.code, p.instance, p.requirement, p.message) for p in loaded.problems] == \
        [(p.code, p.instance, p.requirement, p.message) for p in direct.problems]
    for problem in loaded.problems:  # located now: in a file the mesh was loaded from
        assert problem.file in {file for _, file in documents.values()}
        assert problem.line >= 1


@given(meshes(), st.data())
def test_a_mistake_between_documents_is_refused_where_it_was_made(world, data):
    """Catalogue-wide rules: a placeholder key the provision does not offer, a module
    requirement's listen its module lacks, a base naming another module's missing artifact,
    an artifact-store module whose image would be mirrored into itself, a cycle of bases."""
    kind = data.draw(st.sampled_from(["key not offered", "no such listen", "no such base",
                                      "artifact store mirrored", "cycle of bases"]))
    modules = {n: copy.deepcopy(unstructure(m)) for n, m in world.catalogue.modules.items()}
    provisions = dict(unstructure(world.catalogue.provisions))
    mark = {"name": T, "artifacts": {"img": {"repository": "r", "tag": "1"}},
            "listens": {"http": {"port": 80}}, "containers": []}
    if kind == "key not offered":
        mark["requires"] = [{"as": "sso", "provision": "oidc"}]
        provisions["oidc"] = {"grant": "client+secret", "keys": ["host", "port", "client"]}
        mark["containers"] = [{"name": "c", "artifact": "img", "env": {"DB": "${sso.vhost}"}}]
    elif kind == "no such listen":
        modules["zother"] = {"name": "zother", "listens": {"web": {"port": 1}}}
        mark["requires"] = [{"as": "up", "module": "zother", "listen": "nolisten"}]
    elif kind == "no such base":
        mark["artifacts"]["built"] = {"build": ".", "base": ["zother/missing"]}
    elif kind == "artifact store mirrored":
        provisions.setdefault("artifact-store", {"keys": ["host", "port"]})
        mark["provides"] = [{"provision": "artifact-store", "listen": "http"}]
    else:
        mark["artifacts"] = {"one": {"build": ".", "base": [f"{T}2/two"]}}
        modules[T + "2"] = {"name": T + "2", "artifacts": {"two": {"build": ".",
                                                                    "base": [f"{T}/one"]}}}
    modules[T] = mark
    documents = {"mesh": (dump_yaml(unstructure(world.mesh)), "mesh.yaml"),
                 "provisions": (dump_yaml(provisions), "provisions.yaml")}
    for name, plain in modules.items():
        documents[f"module:{name}"] = (dump_yaml(plain), f"catalogue/{name}/module.yaml")
    note(kind)
    with pytest.raises(InputError) as raised:
        load_inputs(documents)
    faults = raised.value.faults
    note("\n".join(map(str, faults)))
    assert any(f.file == f"catalogue/{T}/module.yaml" and f.line >= 1 for f in faults)


def described(value) -> str:
    """How an error names a value it did not expect (docs/schema.md: say what was found)."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int):
        return f"a number ({value})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    return "a list" if isinstance(value, list) else "a mapping"


WRONG = [None, True, False, 7, "seven", [1], {"a": 1}]
FIELDS = [  # (where, what it must be, how the fault says so)
    (("listens", T, "port"), int, "a whole number"),
    (("containers", 0, "artifact"), str, "a string"),
    (("containers", 0, "run-once"), bool, "true or false"),
    (("secrets",), list, "a list"),
    (("listens",), dict, "a mapping"),
]


def module_holding(world, data, path, value) -> dict:
    """A drawn module of `world` as a plain document, with a listen marked T and one container,
    holding `value` at `path`."""
    module = data.draw(st.sampled_from(sorted(world.catalogue.modules.values(),
                                              key=lambda m: m.name)))
    plain = copy.deepcopy(unstructure(module))
    plain.setdefault("listens", {})[T] = {"port": 80}
    plain["containers"] = [{"name": "c", "artifact": next(iter(plain["artifacts"]))}]
    holder = plain
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = value
    return plain


@given(meshes(), st.sampled_from(FIELDS), st.sampled_from(WRONG), st.data())
def test_a_value_of_the_wrong_type_is_named_for_what_it_is(world, field, value, data):
    path, kind, expected = field
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return  # not a mistake
    plain = module_holding(world, data, path, value)
    with pytest.raises(InputError) as raised:
        load_module(dump_yaml(plain), "module.yaml")
    label = ".".join(str(p) for p in path)
    messages = {(f.message, f.expected) for f in raised.value.faults}
    assert (f"{label} is {described(value)}", expected) in messages, messages


class Opaque:
    """An embedding program's own object, put where a document value belongs."""


IN_MEMORY = [(1, 2), {"a"}, frozenset(), b"bytes", 2.5j, range(3), Opaque()]


@given(meshes(), st.sampled_from(FIELDS), st.sampled_from(IN_MEMORY), st.data())
def test_an_in_memory_value_no_document_makes_is_named_by_its_type(world, field, value, data):
    """`structure()` of a model built in memory: a tuple, set, bytes or an object of the
    program's own at a typed field is a fault naming that type, and naming its key path once
    (`containers[0].run-once is tuple`), not a traceback and not a fault that names nothing."""
    path, _, expected = field
    plain = module_holding(world, data, path, value)
    with pytest.raises(InputError) as raised:
        structure(plain, Module)
    named = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
    messages = {(f.message, f.expected) for f in raised.value.faults}
    assert (f"{named} is {type(value).__name__}", expected) in messages, messages
    assert {(f.file, f.line) for f in raised.value.faults} == {("Module", 0)}


# --------------------------------------------------------------------------- what the loader says


PLACES = {  # where in a module document an entry of which class sits
    "module": ((), "Module"),
    "listen": (("listens", "http"), "Listen"),
    "container": (("containers", 0), "Container"),
    "artifact": (("artifacts", "img"), "Artifact"),
}


def keys_of(cls_name: str) -> list[str]:
    import resolver

    return [f.name.rstrip("_").replace("_", "-") for f in attrs.fields(getattr(resolver, cls_name))]


def minimal_module() -> dict:
    return {"name": "m", "artifacts": {"img": {"repository": "r", "tag": "1"}},
            "listens": {"http": {"port": 80}},
            "containers": [{"name": "c", "artifact": "img"}]}


@given(st.sampled_from(sorted(PLACES)), st.sampled_from(["colour", "prots", "run_once", "As"]))
def test_an_unknown_key_is_refused_at_the_key_naming_every_key_allowed(place, key):
    path, cls_name = PLACES[place]
    plain = minimal_module()
    holder = plain
    for step in path:
        holder = holder[step]
    holder[key] = "x"
    text = dump_yaml(plain)
    with pytest.raises(InputError) as raised:
        load_module(text, "m.yaml")
    (fault,) = raised.value.faults
    assert fault.message == f"unknown key {key!r}"
    assert fault.expected == "one of " + ", ".join(keys_of(cls_name))
    line = text.splitlines()[fault.line - 1]
    assert line[fault.col - 1:].lstrip("- ").startswith(f"{key}:")


@given(st.sampled_from([(("listens", "http"), "port"), (("containers", 0), "artifact"),
                        (("containers", 0), "name"), ((), "name")]))
def test_a_missing_key_is_refused_by_name_where_it_belongs(case):
    path, key = case
    plain = minimal_module()
    holder = plain
    for step in path:
        holder = holder[step]
    del holder[key]
    text = dump_yaml(plain)
    with pytest.raises(InputError) as raised:
        load_module(text, "m.yaml")
    (fault,) = raised.value.faults
    assert (fault.message, fault.expected) == (f"missing required key {key!r}",
                                               "that key to be present")
    lines = text.splitlines()
    if path:  # at the entry that lacks it
        key_line = next(i for i, line in enumerate(lines) if line.strip().startswith(
            f"{path[0]}:")) + 1
        assert fault.line > key_line


@given(st.sampled_from(["", "# only a comment\n", "- a\n- b\n", "just text\n", "3\n"]),
       st.sampled_from(["module.yaml", "mesh.yaml", "ledger.yaml", "provisions.yaml"]))
def test_a_document_that_is_not_a_mapping_says_what_it_is(text, which):
    loader = {"module.yaml": load_module, "mesh.yaml": load_mesh, "ledger.yaml": load_ledger,
              "provisions.yaml": load_provisions}[which]
    with pytest.raises(InputError) as raised:
        loader(text, which)
    (fault,) = raised.value.faults
    assert (fault.file, fault.line, fault.col) == (which, 1, 1)
    if text.strip() in ("", "# only a comment"):
        assert fault.message == "the document is empty"
    else:
        found = {"- a\n- b\n": "a list", "just text\n": "a string ('just text')",
                 "3\n": "a number (3)"}[text]
        assert (fault.message, fault.expected) == (f"the document is {found}", "a mapping")


@given(meshes(), st.data())
def test_a_line_of_broken_yaml_is_refused_where_it_is(world, data):
    text = dump_yaml(unstructure(world.mesh))
    lines = text.splitlines()
    at = data.draw(st.integers(1, len(lines) - 1))
    damage = data.draw(st.sampled_from(["- : ]", "\tkey: tab", "key: value: more",
                                        "key: @at", "mesh: twice"]))
    indent = " " * (len(lines[at]) - len(lines[at].lstrip(" ")))
    if damage == "mesh: twice":
        lines.append("mesh: twice")
        at = len(lines) - 1
    else:
        lines.insert(at, indent + damage)
    broken = "\n".join(lines) + "\n"
    with pytest.raises(InputError) as raised:
        load_mesh(broken, "mesh.yaml")
    note(broken)
    faults = raised.value.faults
    if damage == "mesh: twice":  # well-formed YAML, refused by the reader for the key it repeats
        assert [(f.message, f.expected) for f in faults] == [
            ("duplicate key 'mesh' (first at line 1)", "each key once")], faults
    else:
        assert all(f.message.startswith("YAML: ") and f.expected == "well-formed YAML"
                   for f in faults), faults
    assert any(at + 1 <= f.line <= at + 3 for f in faults), (at + 1, faults)


# --------------------------------------------------------------------------- boundaries


def edges(low, high):
    """(value, accepted) at both ends of a closed range: the ends load, one past them does not."""
    return [(low, True), (high, True), (low - 1, False), (high + 1, False)]


BOUNDARIES = (
    [("listen port", v, ok) for v, ok in edges(1, 65535)]
    + [("fixed port", v, ok) for v, ok in edges(1, 65535)]
    + [("health timeout", v, ok) for v, ok in [(1, True), (0, False)]]
    + [("ssh port", v, ok) for v, ok in edges(1, 65535)]
    + [("host ports first", v, ok) for v, ok in edges(1024, 65535)]
    + [("floor port", v, ok) for v, ok in edges(1, 65535)]
    + [("validity days", v, ok) for v, ok in [(1, True), (0, False)]]
    + [("renew before days", v, ok) for v, ok in [(0, True), (364, True), (365, False),
                                                  (-1, False)]]
    + [("ledger port", v, ok) for v, ok in edges(1, 65535)]
    + [("generation", v, ok) for v, ok in [(1, True), (0, False)]]
)


@pytest.mark.parametrize("what, value, accepted", BOUNDARIES)
def test_the_ends_of_every_range_load_and_one_past_them_is_refused(what, value, accepted):
    module = minimal_module()
    mesh = {"mesh": "m", "nodes": {"a": {"address": "10.0.0.1"}}}
    ledger = {"version": 1}
    if what == "listen port":
        module["listens"]["http"]["port"] = value
    elif what == "fixed port":
        module["listens"]["http"]["fixed"] = value
    elif what == "health timeout":
        module["containers"][0]["health"] = {"tcp": "http", "timeout": value}
    elif what == "ssh port":
        mesh["nodes"]["a"]["ssh-port"] = value
    elif what == "host ports first":
        mesh["host-ports"] = {"first": value, "last": max(value, 65535)}
    elif what == "floor port":
        mesh["floors"] = [{"port": value}]
    elif what == "validity days":
        mesh["ca"] = {"validity-days": value, "renew-before-days": 0}
    elif what == "renew before days":
        mesh["ca"] = {"validity-days": 365, "renew-before-days": value}
    elif what == "ledger port":
        ledger["ports"] = {"a@a": {"http": {"node": "a", "port": value}}}
    else:
        ledger["credentials"] = {"c": {"active": {"generation": value, "slot": "b"}}}
    loads = [(load_module, module, "module.yaml"), (load_mesh, mesh, "mesh.yaml"),
             (load_ledger, ledger, "ledger.yaml")]
    for loader, plain, file in loads:
        changed = plain is {"listen port": module, "fixed port": module,
                            "health timeout": module, "ledger port": ledger,
                            "generation": ledger}.get(what, mesh)
        if accepted or not changed:
            loader(dump_yaml(plain), file)
        else:
            with pytest.raises(InputError):
                loader(dump_yaml(plain), file)


# --------------------------------------------------------------------------- placeholders

SEGMENTS = st.one_of(
    st.tuples(st.just("text"), st.text(st.characters(blacklist_characters="${}"), min_size=1,
                                        max_size=6)),
    st.tuples(st.just("dollar"), st.just("$$")),
    st.tuples(st.just("body"), st.text("abcdefgh.-_", min_size=1, max_size=8)))


@given(st.lists(SEGMENTS, max_size=8))
def test_placeholders_read_and_render_as_the_segments_they_were_written_from(segments):
    """An env value written as text, `$$` and `${body}` segments: placeholders() lists the
    bodies in order, render_placeholders() gives the text, one `$` for each `$$` and the
    lookup of each body; a value cut inside its last `${` is refused."""
    from resolver import PlaceholderSyntaxError
    from resolver.rendering import placeholders, render_placeholders

    written = "".join(v if kind != "body" else "${" + v + "}" for kind, v in segments)
    bodies = [v for kind, v in segments if kind == "body"]
    assert placeholders(written) == bodies
    wanted = "".join({"text": v, "dollar": "$", "body": f"<{v.upper()}>"}[kind]
                     for kind, v in segments)
    assert render_placeholders(written, lambda b: f"<{b.upper()}>") == wanted
    if bodies:
        cut = written[:written.rindex("}")]
        with pytest.raises(PlaceholderSyntaxError):
            placeholders(cut)
        with pytest.raises(PlaceholderSyntaxError):
            render_placeholders(cut, str)
