"""Env filling: every value a container is given says what its placeholders name, for every
instance of the module, and the container refers to exactly the credentials it was told.

Rendering compiles a module's env once and fills the compiled form per instance; this property
draws env values of any text (literal text, `$`, `$$`, an unclosed `${`, and `${…}` of every
documented form and of forms validate() refuses, hence `checked=True`) for a module with two
instances on two nodes, each bound to its own providers, and states each value's meaning from
DESIGN.md's rules alone, read with its own scanner, not the resolver's:

- `$$` is `$`; `${` with no `}` after it leaves the rest of the value as written; any other `$`
  is itself;
- `${self.address}`, `${self.instance}`, `${self.node}`: the instance's node address, name and
  node; `${self.<secret>.password}` of a declared secret: its token, and the container refers to
  it; `${self.<listen>.port}`: the host port assigned to that listen of this instance; any
  other `${self…}` stays as written;
- `${<as>.<key>}`: value `key` of the instance's binding for `as` ("" when it has none, or `as`
  is unbound); a `password` makes the container refer to the binding's credential, when it has
  one; any other `${…}` is "".

Binding values are taken from the resolution (test_mesh_props checks them against the oracle);
what is checked here is what the env makes of them. Credentials are drawn issued or not, so the
generation each reference carries is checked too.
"""

from __future__ import annotations

import re

from hypothesis import given, note
from hypothesis import strategies as st
from pyrsistent import pmap, pvector

from resolver import (
    Artifact,
    Catalogue,
    Container,
    Credential,
    Generation,
    Instance,
    Ledger,
    Listen,
    Mesh,
    Module,
    Node,
    Provide,
    Provision,
    Require,
    SecretRef,
    resolve,
)
from resolver.rendering import (
    credential_id,
    secret_id,
)

from .strategies import PROVISIONS as SHARED_PROVISIONS
from .strategies import digest_of

PROVISIONS = {
    "sql": SHARED_PROVISIONS["sql"],  # a login, with a url
    "events": Provision(scope="node", grant="none", keys=pvector(["host", "port", "url"]),
                        url="mqtt://{host}:{port}"),
    "files": Provision(scope="node", grant="bucket+key",
                       keys=pvector(["host", "port", "bucket", "user", "password", "url"])),
}
NODES = {"a": "10.9.0.1", "b": "fd00:9::2"}
APPS = {"app@a": "a", "app@b": "b"}
PROVIDERS = {"app@a": {"db": "pg@a", "bus": "mq@b", "site": "web@a"},
             "app@b": {"db": "pg@b", "bus": "mq@b", "site": "web@a"}}
SECRETS = ("session",)
LISTENS = ("http", "admin")
# bodies of every documented form, of forms validate() refuses, and of requirements unbound
BODIES = ["self.address", "self.instance", "self.node", "self.session.password",
          "self.other.password", "self.http.port", "self.admin.port", "self.nowhere.port",
          "self", "self.bogus", "self.session", "self.http.port.x", "db.host", "db.port",
          "db.user", "db.password", "db.database", "db.url", "db.vhost", "bus.host",
          "bus.password", "bus.url", "site.url", "site.password", "spare.host",
          "spare.password", "ghost.host", "db", "db.password.x", "", ".", "db.", ".host"]
TEXT = st.text(alphabet="ab:/-.{}$ ", max_size=4)
PIECE = st.one_of(TEXT, st.just("$$"), st.sampled_from(BODIES).map(lambda b: "${" + b + "}"),
                  st.text(alphabet="absel.f$", max_size=6).map(lambda b: "${" + b + "}"))
VALUE = st.lists(PIECE, max_size=5).map("".join)
ENV = st.dictionaries(st.sampled_from(["A", "B", "C", "D", "E", "F"]), VALUE, max_size=6)
# `$$`, a closed placeholder, or an unclosed `${` (the rest of the value as written)
SCANNER = re.compile(r"\$\$|\$\{([^}]*)\}|\$\{.*", re.DOTALL)


def server(name: str, provision: str | None) -> Module:
    return Module(
        name=name, artifacts=pmap({"image": Artifact(repository=f"example.org/{name}", tag="1")}),
        listens=pmap({"main": Listen(port=5000)}),
        provides=pvector([Provide(provision, "main")] if provision else []),
        containers=pvector([Container(name="server", artifact="image")]))


def app(main_env: dict, side_env: dict) -> Module:
    return Module(
        name="app", artifacts=pmap({"image": Artifact(repository="example.org/app", tag="1")}),
        listens=pmap({"http": Listen(port=8080), "admin": Listen(port=9090)}),
        requires=pvector([Require(as_="db", provision="sql"),
                          Require(as_="bus", provision="events"),
                          Require(as_="site", module="web"),
                          Require(as_="spare", provision="files", optional=True)]),
        secrets=pvector(SECRETS),
        containers=pvector([Container(name="main", artifact="image", env=pmap(main_env)),
                            Container(name="side", artifact="image", env=pmap(side_env))]))


@st.composite
def env_worlds(draw):
    modules = {"app": app(draw(ENV), draw(ENV)), "pg": server("pg", "sql"),
               "mq": server("mq", "events"), "web": server("web", None)}
    instances = {"pg@a": Instance("pg", "a"), "pg@b": Instance("pg", "b"),
                 "mq@b": Instance("mq", "b"), "web@a": Instance("web", "a")}
    for name, node in APPS.items():
        instances[name] = Instance("app", node, bind=pmap(PROVIDERS[name]))
    mesh = Mesh(mesh="fill", nodes=pmap({n: Node(address=a) for n, a in NODES.items()}),
                instances=pmap(instances))
    credentials = {}
    for name, node in APPS.items():  # each issued (at a drawn generation) or not yet
        ids = [secret_id(name, s) for s in SECRETS] + [
            credential_id("sql", PROVIDERS[name]["db"], name)]
        for cred_id in ids:
            generation = draw(st.sampled_from([None, 1, 4]))
            if generation is not None:
                slot = "a" if cred_id.startswith("sql/") else None
                credentials[cred_id] = Credential(active=Generation(
                    generation, slot, pmap({node: "c2VhbGVk"})))
    pins = {f"example.org/{m}:1": digest_of(m) for m in modules}
    ledger = Ledger(pins=pmap(pins), credentials=pmap(credentials))
    return Catalogue(pmap(modules), pmap(PROVISIONS)), mesh, ledger


def expected_env(raw: str, name: str, module: Module, resolution, ledger, refs: set) -> str:
    """`raw` as instance `name` must be told it, every credential it refers to added to refs."""
    node = APPS[name]
    rendering = resolution.renderings[name]
    told = {b.requirement: b for b in rendering.bindings}
    ports = resolution.ledger.ports.get(name, {})

    def generation(cred_id):
        cred = ledger.credentials.get(cred_id)
        return cred.active.generation if cred is not None and cred.active is not None else None

    def one(match) -> str:
        text = match.group(0)
        if text == "$$":
            return "$"
        if match.group(1) is None:  # an unclosed ${: the rest as written
            return text
        parts = match.group(1).split(".")
        if parts[0] == "self":
            rest = parts[1:]
            if rest == ["address"]:
                return NODES[node]
            if rest == ["instance"]:
                return name
            if rest == ["node"]:
                return node
            if len(rest) == 2 and rest[1] == "password" and rest[0] in module.secrets:
                cred_id = f"secret/{name}/{rest[0]}"
                refs.add(SecretRef(cred_id, generation(cred_id)))
                return "${secret:" + cred_id + "}"
            if len(rest) == 2 and rest[1] == "port" and rest[0] in ports:
                return str(ports[rest[0]].port)
            return text
        if len(parts) != 2 or parts[0] not in told:
            return ""
        binding = told[parts[0]]
        if parts[1] == "password" and binding.secret is not None:
            refs.add(binding.secret)
        return binding.values.get(parts[1], "")

    return SCANNER.sub(one, raw)


@given(env_worlds())
def test_each_env_value_says_what_its_placeholders_name_for_each_instance(world):
    catalogue, mesh, ledger = world
    resolution = resolve(catalogue, mesh, ledger, checked=True)  # bodies validate() refuses too
    assert not resolution.refused, [p.message for p in resolution.problems]
    module = catalogue.modules["app"]
    for name in APPS:
        rendering = resolution.renderings[name]
        assert {b.requirement for b in rendering.bindings} == {"db", "bus", "site"}
        declared = {c.container: c for c in rendering.containers}
        for container in module.containers:
            refs: set = set()
            want = {key: expected_env(raw, name, module, resolution, ledger, refs)
                    for key, raw in container.env.items()}
            got = declared[container.name]
            note(f"{name}/{container.name}: {dict(container.env)}")
            assert dict(got.env) == want
            assert list(got.env) == sorted(want)  # in key order, as every rendering writes it
            assert list(got.secrets) == sorted(refs)
