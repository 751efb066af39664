"""The documents of the fuzzing harness: every repository document as a seed, and the seeded
mutators that break it (scripts/fuzz.py, property_tests/test_fuzz_props.py).

- SEEDS are every input document of the repository: each fixture's mesh.yaml and ledger.yaml,
  each catalogue's module.yaml and provisions.yaml (the project catalogue and the refusal
  cases' own). Each is checked in a mesh that reads it: its own fixture, or for a catalogue
  document a fixture whose instances use that module.
- A mutation is a seeded function of (seed document, random.Random): the same seed and index
  give the same bytes on every machine and with any number of workers.
- Tree mutators change the parsed document and write it back (wrong types, missing and
  unknown keys, references to nothing, the mesh's and modules' own rules broken); text
  mutators damage the YAML (tabs, nesting, aliases, huge values, tags); byte mutators damage
  the encoding.
"""

from __future__ import annotations

import copy
import random
import re
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import attrs

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import resolver.documents  # noqa: E402

# A parsed YAML document (resolver.documents.parse_yaml gives Any): mappings, lists and
# scalars, which the tree mutators look into with isinstance and change in place.
Tree = Any
TreePath = tuple[object, ...]  # the keys and indices from the root to one value
TreeMutator = Callable[[random.Random, Tree], Tree]
TextMutator = Callable[[random.Random, str], str]
ByteMutator = Callable[[random.Random, str], bytes]


# --------------------------------------------------------------------------- seeds


@attrs.frozen
class Seed:
    path: str  # relative to the repository (and to a checker's private copy)
    kind: str  # mesh, ledger, module, provisions
    mesh_dir: str  # the mesh directory whose `mesh check` reads it
    text: str


def _instance_modules(mesh_path: Path) -> set[str]:
    data, _ = resolver.documents.parse_yaml(mesh_path.read_bytes(), str(mesh_path))
    instances = data.get("instances") or {}
    return {i["module"] for i in instances.values()
            if isinstance(i, dict) and isinstance(i.get("module"), str)}


def load_seeds(repo: Path = REPO) -> list[Seed]:
    meshes = sorted(p.parent for p in (repo / "fixtures").rglob("mesh.yaml"))
    # the example meshes first, so a module is checked in the richest mesh that uses it
    meshes.sort(key=lambda d: ("refusals" in d.parts, str(d)))
    uses = {d: _instance_modules(d / "mesh.yaml") for d in meshes}
    seeds: list[Seed] = []

    def add(path: Path, kind: str, mesh_dir: Path) -> None:
        seeds.append(Seed(str(path.relative_to(repo)), kind, str(mesh_dir.relative_to(repo)),
                          path.read_text(encoding="utf-8")))

    for d in meshes:
        add(d / "mesh.yaml", "mesh", d)
        if (d / "ledger.yaml").exists():
            add(d / "ledger.yaml", "ledger", d)
        local = d / "catalogue"
        if local.is_dir():
            for path in sorted(local.glob("*/module.yaml")):
                add(path, "module", d)
            if (local / "provisions.yaml").exists():
                add(local / "provisions.yaml", "provisions", d)
    default = repo / "fixtures" / "homelab"
    for path in sorted((repo / "catalogue").glob("*/module.yaml")):
        name = path.parent.name
        users = [d for d in meshes if name in uses[d]
                 and not (d / "catalogue").is_dir()] or [default]
        add(path, "module", users[0])
    add(repo / "catalogue" / "provisions.yaml", "provisions", default)
    return seeds


# --------------------------------------------------------------------------- tree mutators


def _walk(data: Tree, path: TreePath = ()) -> Iterator[tuple[TreePath, Tree]]:
    yield path, data
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _walk(v, path + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _walk(v, path + (i,))


def _get(data: Tree, path: TreePath) -> Tree:
    for key in path:
        data = data[key]
    return data


def _places(data: Tree, kinds: tuple[type[object], ...] = (dict, list, str, int, float, bool,
                                                          type(None))) -> list[TreePath]:
    return [p for p, v in _walk(data) if isinstance(v, kinds)]


def _replace(data: Tree, path: TreePath, value: Tree) -> Tree:
    if not path:
        return value
    _get(data, path[:-1])[path[-1]] = value
    return data


def _other_value(rng: random.Random, like: object) -> Tree:
    choices = ["text", 7, -1, 0, 65536, 3.5, True, False, None, [], {}, ["a", 1], {"k": "v"},
               "10.0.0.1", "sha256:" + "0" * 64, "${db.host}", "${", "/abs", "../up", "",
               "a" * 300, "x@y", "0750", "1:1", "tcp", "node"]
    value = rng.choice(choices)
    while type(value) is type(like) and value == like:
        value = rng.choice(choices)
    return value


def _typo(rng: random.Random, key: str) -> str:
    if not key:
        return "x"
    i = rng.randrange(len(key))
    return rng.choice([key[:i] + key[i + 1:], key[:i] + "_" + key[i:], key.upper(),
                       key.replace("-", "_"), key + "s", " " + key])


def delete_key(rng: random.Random, data: Tree) -> Tree:
    maps = [p for p in _places(data, (dict,)) if _get(data, p)]
    if not maps:
        return data
    holder = _get(data, rng.choice(maps))
    del holder[rng.choice(list(holder))]
    return data


def wrong_type(rng: random.Random, data: Tree) -> Tree:
    path = rng.choice(_places(data))
    return _replace(data, path, _other_value(rng, _get(data, path)))


def unknown_key(rng: random.Random, data: Tree) -> Tree:
    maps = _places(data, (dict,))
    if not maps:
        return data
    holder = _get(data, rng.choice(maps))
    holder[rng.choice(["extra", "Name", "ports", "x-y", "env", "version", "1", "mesh"])
           + str(rng.randrange(3))] = _other_value(rng, None)
    return data


def typo_key(rng: random.Random, data: Tree) -> Tree:
    maps = [p for p in _places(data, (dict,)) if _get(data, p)]
    if not maps:
        return data
    holder = _get(data, rng.choice(maps))
    key = rng.choice(list(holder))
    if isinstance(key, str):
        holder[_typo(rng, key)] = holder.pop(key)
    return data


def swap_values(rng: random.Random, data: Tree) -> Tree:
    places = [p for p in _places(data) if p]
    if len(places) < 2:
        return data
    a, b = rng.sample(places, 2)
    if a[:len(b)] == b or b[:len(a)] == a:
        return data
    va, vb = _get(data, a), _get(data, b)
    _replace(data, a, vb)
    return _replace(data, b, va)


def empty_collection(rng: random.Random, data: Tree) -> Tree:
    places = [p for p in _places(data, (dict, list)) if p]
    if not places:
        return data
    path = rng.choice(places)
    return _replace(data, path, type(_get(data, path))())


def repeat_item(rng: random.Random, data: Tree) -> Tree:
    lists = [p for p in _places(data, (list,)) if _get(data, p)]
    if not lists:
        return data
    items = _get(data, rng.choice(lists))
    items.append(items[rng.randrange(len(items))])
    return data


def cross_reference(rng: random.Random, data: Tree) -> Tree:
    """A reference to something that exists elsewhere, or to nothing at all."""
    strings = [p for p in _places(data, (str,)) if p]
    if not strings:
        return data
    names = [k for p, v in _walk(data) if isinstance(v, dict) for k in v if isinstance(k, str)]
    value = rng.choice(names + ["ghost", "ghost@nowhere", "postgres@anchor", "keycloak@home"])
    return _replace(data, rng.choice(strings), value)


def _names_in(data: Mapping[object, object], key: str) -> list[str]:
    held = data.get(key)
    return sorted(k for k in held if isinstance(k, str)) if isinstance(held, dict) else []


def mesh_rules(rng: random.Random, data: Tree) -> Tree:
    """The rules between a mesh's own entries, broken with well-typed values: a port range of
    one port, a node or provider that is not there, a floor on a port a module fixes..."""
    if not isinstance(data, dict) or "nodes" not in data and "instances" not in data:
        return _module_rules(rng, data)
    nodes = _names_in(data, "nodes") + ["mars"]
    instances = _names_in(data, "instances") + ["ghost@a"]
    edit = rng.choice(["range", "node", "bind", "default", "substrate", "floor", "parts",
                       "control", "address", "ca", "module"])
    first = rng.choice([1024, 20000, 65535])
    if edit == "range":
        data["host-ports"] = {"first": first, "last": first + rng.choice([0, 0, 1, 5])}
    elif edit == "floor":
        data["floors"] = [{"port": rng.choice([22, 25, 53, 5432, 5672, 20000]),
                           "protocol": rng.choice(["tcp", "udp"]),
                           "sources": rng.choice(["any", "mesh"])}]
    elif edit == "default":
        data["defaults"] = {rng.choice(["postgres-database", "oidc", "amqp", "nothing"]):
                            rng.choice(instances)}
    elif edit == "substrate":
        data["substrate"] = {rng.choice(["store", "broker"]): rng.choice(instances)}
    elif edit == "control" and isinstance(data.get("nodes"), dict):
        for node in data["nodes"].values():
            if isinstance(node, dict):
                node["control"] = True
    elif edit == "address" and isinstance(data.get("nodes"), dict):
        for node in data["nodes"].values():
            if isinstance(node, dict):
                node["address"] = rng.choice(["10.0.0.1", "fd00::1", "::", "0.0.0.0"])
    elif edit == "ca":
        data["ca"] = {"validity-days": rng.choice([1, 30, 365]),
                      "renew-before-days": rng.choice([0, 29, 364])}
    elif isinstance(data.get("instances"), dict) and data["instances"]:
        name = rng.choice(sorted(data["instances"]))
        instance = data["instances"][name]
        if not isinstance(instance, dict):
            return data
        if edit == "node":
            instance["node"] = rng.choice(nodes)
        elif edit == "bind":
            instance["bind"] = {rng.choice(["db", "sso", "broker", "forge", "x"]):
                                rng.choice(instances)}
        elif edit == "parts":
            instance["parts"] = [rng.choice(["backups", "server", "nothing"])]
        else:
            instance["module"] = rng.choice(["postgres", "keycloak", "registry", "control",
                                             "lavinmq", "nothing"])
    return data


def _module_rules(rng: random.Random, data: Tree) -> Tree:
    """The rules of a module broken with well-typed values: a fixed port a floor holds, a
    claim, an absolute state path, a facility, a requirement by module, a health check."""
    if not isinstance(data, dict) or "name" not in data:
        return data
    edit = rng.choice(["fixed", "claim", "state", "facility", "require", "provide", "health",
                       "optional", "run-once"])
    held = data.get("listens")
    listens = held if isinstance(held, dict) else {}
    containers = [c for c in data.get("containers") or [] if isinstance(c, dict)]
    if edit == "fixed" and listens:
        listen = listens[rng.choice(sorted(listens))]
        if isinstance(listen, dict):
            listen["fixed"] = rng.choice([22, 25, 53, 80, 5672])
    elif edit == "claim":
        data["claims"] = [rng.choice(["smtp", "port/25", "seat"])]
    elif edit == "state":
        data["state"] = {"files": {"path": rng.choice(["/srv/shared", "data", "/", "a/../b"])}}
    elif edit == "facility":
        data["facilities"] = [rng.choice(["docker-socket", "gpu"])]
    elif edit == "require":
        data.setdefault("requires", [])
        if isinstance(data["requires"], list):
            data["requires"].append(rng.choice([
                {"as": "peer", "module": rng.choice(["postgres", "gitea", "nothing"])},
                {"as": "db", "provision": "postgres-database", "provider": "postgres@home"},
                {"as": "mq", "provision": "amqp", "optional": True}]))
    elif edit == "provide":
        data["provides"] = [{"provision": rng.choice(["postgres-database", "mesh-ca", "x"]),
                             "listen": rng.choice(sorted(listens) or ["none"])}]
    elif containers:
        container = rng.choice(containers)
        if edit == "health":
            container["health"] = rng.choice([{"tcp": rng.choice(sorted(listens) or ["x"])},
                                              {"command": []}, {"http": {"listen": "x"}}])
        else:
            container["run-once" if edit == "run-once" else "part"] = (
                True if edit == "run-once" else "server")
    return data


TREE_MUTATORS: dict[str, TreeMutator] = {
    "delete_key": delete_key, "wrong_type": wrong_type, "unknown_key": unknown_key,
    "typo_key": typo_key, "swap_values": swap_values, "empty_collection": empty_collection,
    "repeat_item": repeat_item, "cross_reference": cross_reference, "rules": mesh_rules,
}


# --------------------------------------------------------------------------- text mutators

_VALUE = re.compile(r"^(?P<head>\s*(?:- )?[A-Za-z0-9_@.\-\"']+:)(?P<sep>[ \t]+)(?P<value>\S.*)$",
                    re.M)


def _value_spans(text: str) -> list[tuple[int, int]]:
    return [(m.start("value"), m.end("value")) for m in _VALUE.finditer(text)
            if not m.group("value").startswith(("#", "|", ">"))]


def _at_value(rng: random.Random, text: str, new: str) -> str:
    spans = _value_spans(text)
    if not spans:
        return text + f"\nextra: {new}\n"
    start, end = rng.choice(spans)
    return text[:start] + new + text[end:]


def _line_starts(text: str) -> list[int]:
    return [0] + [m.end() for m in re.finditer("\n", text) if m.end() < len(text)]


def duplicate_key(rng: random.Random, text: str) -> str:
    lines = text.split("\n")
    keyed = [i for i, line in enumerate(lines) if re.match(r"^\s*[A-Za-z0-9_@.\-]+:", line)]
    if not keyed:
        return text
    i = rng.choice(keyed)
    lines.insert(i + 1, lines[i])
    return "\n".join(lines)


def tabs(rng: random.Random, text: str) -> str:
    lines = text.split("\n")
    i = rng.randrange(len(lines))
    line = lines[i]
    stripped = line.lstrip(" ")
    indent = len(line) - len(stripped)
    lines[i] = rng.choice(["\t" + stripped, " " * indent + "\t" + stripped,
                           line.replace(": ", ":\t", 1), line + "\t"])
    return "\n".join(lines)


def deep_nesting(rng: random.Random, text: str) -> str:
    depth = rng.choice([10, 31, 32, 33, 64, 200, 260, 1000, 20000])
    style = rng.choice(["flow list", "flow map", "block"])
    if style == "flow list":
        new = "[" * depth + "1" + "]" * depth
    elif style == "flow map":
        new = "{a: " * depth + "1" + "}" * depth
    else:
        depth = min(depth, 400)
        new = "\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(depth)) + "  " * (depth + 1) + "v"
        return text.rstrip("\n") + f"\ndeep:{new}\n"
    return _at_value(rng, text, new)


def huge_number(rng: random.Random, text: str) -> str:
    digits = rng.choice([19, 20, 32, 33, 64, 4300, 4301, 5000, 100_000])
    body = "".join(rng.choice("0123456789") for _ in range(min(digits, 64)))
    body = (body * (digits // len(body) + 1))[:digits]
    body = rng.choice(["1", "9"]) + body[1:]
    new = rng.choice([body, "-" + body, "0x" + body, "0o" + body.replace("8", "7").replace("9", "7"),
                      body + ".5", body + "e9", "1e" + body[:6], "1_" + body, "!!int " + body,
                      "!!float " + body])
    return _at_value(rng, text, new)


def odd_number(rng: random.Random, text: str) -> str:
    new = rng.choice(["0x", "0o", "0b", "_", "__", "1_000", ".inf", "-.inf", ".nan", "-0", "1e400",
                      "65536", "-1", "0", "0x1F", "0o17", "017", "1.", ".5", "1e", "+", "- 1",
                      "!!int abc", "!!float x", "!!bool yes", "!!null 3", "yes", "on", "~", "null"])
    return _at_value(rng, text, new)


def huge_string(rng: random.Random, text: str) -> str:
    size = rng.choice([1_000, 65_536, 65_537, 70_000, 300_000, 1_000_000] + [2_200_000] * 0)
    if rng.random() < 0.02:  # rarely, past the document's size limit
        size = rng.choice([2 * 1024 * 1024, 3_000_000])
    body = "".join(rng.choice("abcdefghij") for _ in range(64))
    body = (body * (size // 64 + 1))[:size]
    style = rng.choice(["plain", "double", "single", "block", "key"])
    if style == "key":
        return text.rstrip("\n") + f"\n{body}: 1\n"
    if style == "block":
        return text.rstrip("\n") + f"\nlong: |\n  {body}\n"
    new = {"plain": body, "double": f'"{body}"', "single": f"'{body}'"}[style]
    return _at_value(rng, text, new)


def non_utf8(rng: random.Random, text: str) -> bytes:
    raw = text.encode("utf-8")
    bad = rng.choice([b"\xff", b"\xfe", b"\xc3", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80",
                      b"\x80", b"\xe2\x82", b"\xf4\x90\x80\x80"])
    how = rng.choice(["insert", "utf16", "latin1", "truncate-char"])
    if how == "utf16":
        return text.encode("utf-16")
    if how == "latin1":
        return (text + "\nnote: café ñ\n").encode("latin-1", "replace")
    if how == "truncate-char":
        return raw + "é".encode("utf-8")[:1]
    i = rng.randrange(len(raw) + 1)
    return raw[:i] + bad + raw[i:]


def control_chars(rng: random.Random, text: str) -> str:
    ch = rng.choice(["\x00", "\x07", "\x1b", "\x7f", "\x85", "\u2028", "\u2029", "\ufeff", "\r",
                     "\x0c", "\x0b", "\ufffe", "\U0001F600", "\u202e"])
    i = rng.randrange(len(text) + 1)
    return text[:i] + ch + text[i:]


def _laughs(rng: random.Random) -> str:
    width = rng.choice([2, 5, 9, 10])
    levels = rng.choice([3, 4, 5, 7, 9, 12])
    lines = [f"  l0: &l0 [{', '.join(['lol'] * width)}]"]
    for n in range(1, levels):
        lines.append(f"  l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * width)}]")
    return "\n".join(lines)


def aliases(rng: random.Random, text: str) -> str:
    how = rng.choice(["laughs", "laughs-flow", "recursive", "undefined", "anchor-reuse", "merge",
                      "merge-bad", "alias-key", "deep-alias", "chain"])
    if how == "laughs":
        return text.rstrip("\n") + "\nlaughs:\n" + _laughs(rng) + "\n"
    if how == "laughs-flow":
        return "lol: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"l{i}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)) + text
    if how == "recursive":
        return _at_value(rng, text, rng.choice(["&r [*r]", "&r {a: *r}", "&r [1, [2, *r]]"]))
    if how == "undefined":
        return _at_value(rng, text, "*nowhere")
    if how == "anchor-reuse":
        text = _at_value(rng, text, "&a 1")
        return _at_value(rng, text, "*a")
    if how == "merge":
        return text.rstrip("\n") + "\nbase: &base {address: 10.0.0.9, port: 1}\nmore:\n  <<: *base\n  x: 1\n"
    if how == "merge-bad":
        return _at_value(rng, text, rng.choice(["{<<: 3}", "{<<: [1, 2]}", "{<<: *x}", "<<"]))
    if how == "alias-key":
        return text.rstrip("\n") + "\nk: &k [1, 2]\n*k : v\n"
    if how == "deep-alias":
        return ("d: &d " + "[" * 20 + "1" + "]" * 20 + "\n"
                + "e: " + "[" * 20 + "*d" + "]" * 20 + "\n" + text)
    # a long chain of aliases, each twice the last
    return "c0: &c0 [a, b]\n" + "".join(f"c{i}: &c{i} [*c{i - 1}, *c{i - 1}]\n"
                                       for i in range(1, rng.choice([10, 14, 20, 40]))) + text


def truncate(rng: random.Random, text: str) -> bytes:
    raw = text.encode("utf-8")
    return raw[:rng.randrange(len(raw) + 1)]


def byte_noise(rng: random.Random, text: str) -> bytes:
    raw = bytearray(text.encode("utf-8"))
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(raw) + 1)
        op = rng.choice(["flip", "insert", "delete"])
        if op == "flip" and i < len(raw):
            raw[i] ^= 1 << rng.randrange(8)
        elif op == "insert":
            raw[i:i] = bytes([rng.randrange(256)])
        elif i < len(raw):
            del raw[i]
    return bytes(raw)


def syntax_noise(rng: random.Random, text: str) -> str:
    tokens = [": ", "- ", "{", "}", "[", "]", '"', "'", "&", "*", "!", "|", ">", "%", "@", "`",
              "#", "\n---\n", "\n...\n", "? ", ",", "\n  ", "\n    - ", ":", "<<: ", "!!str ",
              "&x ", "*x", "%YAML 1.2\n---\n", "\\"]
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(text) + 1)
        text = text[:i] + rng.choice(tokens) + text[i:]
    return text


def tags(rng: random.Random, text: str) -> str:
    return _at_value(rng, text, rng.choice([
        "!!binary aGVsbG8=", "!!set {a, b}", "!!omap [a: 1]", "!!python/object:os.system x",
        "!custom x", "!!timestamp 2001-12-14", "!!str 3", "!!int 3", "!!map {a: 1}",
        "!!seq [1]", "!<tag:yaml.org,2002:str> x", "!e!x y", "!!bool true", "!!null ''",
        "2001-13-45", "2001-12-14t21:59:43.10-05:00"]))


def documents(rng: random.Random, text: str) -> str:
    return rng.choice([
        text + "\n---\n" + text, "---\n" + text, text + "\n...\n", "%YAML 1.1\n---\n" + text,
        "%YAML 1.2\n---\n" + text, "%YAML 2.0\n---\n" + text, "%TAG !e! tag:e.com,2000:\n---\n" + text,
        "", "\n\n", "# only a comment\n", "---\n", "~\n", "[]\n", "just text\n", "- a\n- b\n", "3\n"])


def lines(rng: random.Random, text: str) -> str:
    parts = text.split("\n")
    op = rng.choice(["delete", "duplicate", "indent", "dedent", "shuffle", "swap"])
    i = rng.randrange(len(parts))
    if op == "delete":
        del parts[i]
    elif op == "duplicate":
        parts[i:i] = [parts[i]] * rng.choice([1, 2, 50])
    elif op == "indent":
        parts[i] = "  " + parts[i]
    elif op == "dedent":
        parts[i] = parts[i].lstrip()
    elif op == "shuffle":
        rng.shuffle(parts)
    else:
        j = rng.randrange(len(parts))
        parts[i], parts[j] = parts[j], parts[i]
    return "\n".join(parts)


def paths(rng: random.Random, text: str) -> str:
    """What a mesh.yaml's `catalogue:` and `ledger:` may name: a path too long for the file
    system, a NUL, a file where a directory belongs, a directory where a file belongs."""
    value = rng.choice(['"' + "x" * 5000 + '"', '"' + "d/" * 2100 + '"', '"' + "y" * 256 + '"',
                        '"a\\0b"', "/", ".", "..", "mesh.yaml", "/dev/null", "/dev/zero",
                        "/etc/passwd", "nowhere", "mesh.yaml/x", "/proc/self", "''", "~", "[a]",
                        "3", "../../catalogue/postgres", "../../catalogue/provisions.yaml",
                        "../../fixtures", "../../catalogue/control/image"])
    key = rng.choice(["catalogue", "ledger"])
    if re.search(rf"^{key}:", text, re.M):
        return re.sub(rf"^{key}:.*$", f"{key}: {value}", text, count=1, flags=re.M)
    return text.rstrip("\n") + f"\n{key}: {value}\n"


TEXT_MUTATORS: dict[str, TextMutator] = {
    "duplicate_key": duplicate_key, "tabs": tabs, "deep_nesting": deep_nesting,
    "huge_number": huge_number, "odd_number": odd_number, "huge_string": huge_string,
    "control_chars": control_chars, "aliases": aliases, "syntax_noise": syntax_noise,
    "tags": tags, "documents": documents, "lines": lines, "paths": paths,
}
BYTE_MUTATORS: dict[str, ByteMutator] = {
    "non_utf8": non_utf8, "truncate": truncate, "byte_noise": byte_noise,
}
MUTATORS = {**TREE_MUTATORS, **TEXT_MUTATORS, **BYTE_MUTATORS}


_PARSED: dict[str, Tree] = {}


def _parsed(seed: Seed) -> Tree:
    if seed.path not in _PARSED:
        _PARSED[seed.path], _ = resolver.documents.parse_yaml(seed.text, seed.path)
    return _PARSED[seed.path]


def apply(seed: Seed, names: list[str], rng: random.Random) -> bytes:
    """The seed's text with the named mutators applied in order (tree ones on the parsed
    document, then text ones, then byte ones)."""
    order = list(TREE_MUTATORS) + list(TEXT_MUTATORS) + list(BYTE_MUTATORS)
    names = sorted(names, key=order.index)
    text = seed.text
    tree_names = [n for n in names if n in TREE_MUTATORS]
    if tree_names:
        data = copy.deepcopy(_parsed(seed))
        for name in tree_names:
            data = TREE_MUTATORS[name](rng, data)
        text = resolver.documents.dump_yaml(data)
    for name in names:
        if name in TEXT_MUTATORS:
            text = TEXT_MUTATORS[name](rng, text)
    mutated: str | bytes = text
    for name in names:
        if name in BYTE_MUTATORS:
            mutated = BYTE_MUTATORS[name](rng, mutated if isinstance(mutated, str)
                                          else mutated.decode("utf-8", "replace"))
    return mutated.encode("utf-8", "surrogatepass") if isinstance(mutated, str) else mutated


def mutation(seeds: list[Seed], seed: int, index: int) -> tuple[Seed, list[str], bytes]:
    """Document `index` of a run: its seed document, the mutators and the mutated bytes."""
    rng = random.Random(f"{seed}:{index}")
    document = rng.choice(seeds)
    names = rng.sample(sorted(MUTATORS), rng.choice([1, 1, 1, 2, 2, 3]))
    if document.kind != "mesh" and "paths" in names:
        names.remove("paths")
        names = names or ["wrong_type"]
    return document, names, apply(document, names, rng)


