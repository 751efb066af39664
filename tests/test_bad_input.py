"""Bad input never crashes, hangs or hides its position (issue 12).

Each case is what an operator can do by mistake (or a fuzzer on purpose) to a mesh directory,
checked the way the operator runs it: `mesh check DIR`, in-process and once as a subprocess.
Every fault is one line `file:line:col: what; expected …` (the line and column of the
offending byte, node or alias), the exit code is 2, and nothing that only follows from the
first fault is reported. What the harness (scripts/fuzz.py) found is at the end; the harness
itself is tested in test_fuzz_harness.py.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from executors.cli import main as cli
from resolver import InputError
from resolver.documents import LIMITS, load_ledger, load_mesh, load_module, parse_yaml

REPO = Path(__file__).resolve().parent.parent

MESH = """\
mesh: home
nodes:
  anchor: {address: 10.0.0.1}
instances:
  web@anchor: {module: web, node: anchor}
"""

PROVISIONS = """\
http-api:
  keys: [host, port]
"""

WEB = """\
name: web
artifacts:
  web: {repository: mesh-test/busybox, tag: "1"}
listens:
  http: {port: 8080}
containers:
  - name: web
    artifact: web
"""

LEDGER = f"""\
version: 1
pins:
  mesh-test/busybox:1: sha256:{"ab" * 32}
"""

FAULT_LINE = re.compile(r"^(?P<file>[^:]+):(?P<line>[1-9]\d*):(?P<col>[1-9]\d*): (?P<what>.+); "
                        r"expected (?P<expected>.+)$")

LAUGHS = """\
mesh: home
nodes: {anchor: {address: 10.0.0.1}}
lol:
  a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]
  b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
  c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
  d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
  e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
  f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
  g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
  h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]
  i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


def write(root: Path, files: dict) -> Path:
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return root


def meshdir(tmp_path: Path, **overrides) -> Path:
    files = {"mesh.yaml": MESH, "catalogue/provisions.yaml": PROVISIONS,
             "catalogue/web/module.yaml": WEB, "ledger.yaml": LEDGER}
    for key, content in overrides.items():
        files[key.replace("__", "/").replace("_yaml", ".yaml")] = content
    return write(tmp_path / "mesh", files)


def check(directory: Path) -> tuple[int, list[str], str]:
    """`mesh check DIR` in-process: (exit code, fault or problem lines, stdout)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["check", str(directory)])
    lines = err.getvalue().splitlines()
    if code == 2:
        assert re.match(r"^\d+ errors?$", lines[-1]), lines
        lines = lines[:-1]
    return code, lines, out.getvalue()


def faults(directory: Path) -> list[re.Match]:
    """The fault lines of a check that must exit 2, each parsed as file:line:col: …; expected …"""
    code, lines, _ = check(directory)
    assert code == 2, lines
    parsed = [FAULT_LINE.match(line) for line in lines]
    assert all(parsed), lines
    return parsed


def one_fault(directory: Path) -> re.Match:
    found = faults(directory)
    assert len(found) == 1, [m.group(0) for m in found]
    return found[0]


def at(match: re.Match) -> tuple[int, int]:
    return int(match.group("line")), int(match.group("col"))


def locate(text: str, needle: str) -> tuple[int, int]:
    """1-based (line, col) of the first occurrence of needle in text."""
    start = text.index(needle)
    return text.count("\n", 0, start) + 1, start - (text.rfind("\n", 0, start) + 1) + 1


# --------------------------------------------------------------------------- the cases


def test_nesting_250_deep_is_a_located_fault_not_a_recursion_error(tmp_path):
    mesh = MESH + "extra: " + "[" * 250 + "]" * 250 + "\n"
    fault = one_fault(meshdir(tmp_path, mesh_yaml=mesh))
    assert at(fault) == (6, 8 + 31)  # the root mapping is level 1: this list opens level 33
    assert "nesting deeper than 32 levels" in fault.group("what")


def test_nesting_200_000_deep_is_refused_without_reading_the_rest(tmp_path):
    mesh = MESH.replace("{module: web, node: anchor}", "{a: " * 200_000 + "1" + "}" * 200_000)
    fault = one_fault(meshdir(tmp_path, mesh_yaml=mesh))
    assert at(fault) == (5, 15 + 4 * 30)  # mesh, instances, then the 31st `{` is level 33
    assert fault.group("expected") == "at most 32 nested mappings and lists"


@pytest.mark.parametrize("number", ["9" * 4301, "-" + "1" * 5000, "0x" + "f" * 5000,
                                    "1" * 4000 + ".5", "!!int " + "7" * 33],
                         ids=["4301 digits", "negative", "hex", "float", "tagged"])
def test_a_number_past_the_limit_is_refused_at_its_position(tmp_path, number):
    mesh = MESH.replace("{address: 10.0.0.1}", "{address: 10.0.0.1, ssh-port: " + number + "}")
    fault = one_fault(meshdir(tmp_path, mesh_yaml=mesh))
    assert at(fault) == locate(mesh, number)
    assert fault.group("what") == f"a number of {len(number.replace('!!int ', '')):,} characters"
    assert fault.group("expected") == "at most 32 characters (quote it if it is text)"


def test_a_quoted_long_number_is_text(tmp_path):
    fault = one_fault(meshdir(tmp_path, mesh_yaml=MESH.replace(
        "{address: 10.0.0.1}", '{address: 10.0.0.1, ssh-port: "' + "9" * 5000 + '"}')))
    assert "nodes.anchor.ssh-port is a string" in fault.group("what")
    assert len(fault.group(0)) < 300  # the value is shortened in the message


@pytest.mark.parametrize("key", ["catalogue", "ledger"])
def test_a_path_too_long_for_the_file_system_is_a_fault_at_its_key(tmp_path, key):
    directory = meshdir(tmp_path, mesh_yaml=MESH + f"{key}: {'x' * 5000}\n")
    fault = one_fault(directory)
    assert at(fault) == (6, len(key) + 3)
    assert fault.group("what").endswith("cannot be read: File name too long")
    assert f"named by `{key}:`" in fault.group("expected")


def test_a_path_with_a_nul_is_a_fault_at_its_key(tmp_path):
    fault = one_fault(meshdir(tmp_path, mesh_yaml=MESH + 'ledger: "led\\0ger"\n'))
    assert at(fault) == (6, 9)
    assert "the path holds a NUL character" in fault.group("what")


def test_a_directory_where_a_file_belongs_and_a_file_where_a_directory_belongs(tmp_path):
    directory = meshdir(tmp_path, mesh_yaml=MESH + "catalogue: ledger.yaml\nledger: cat\n")
    (directory / "cat").mkdir()
    found = faults(directory)
    assert [at(m) for m in found] == [(6, 12), (7, 9)]
    assert found[0].group("what").endswith("is not a directory")
    assert found[1].group("what").endswith("is a directory")
    # a module directory whose manifest is a directory: located at `catalogue:` too
    directory = meshdir(tmp_path / "2", mesh_yaml=MESH + "catalogue: catalogue\n")
    (directory / "catalogue" / "db" / "module.yaml").mkdir(parents=True)
    fault = one_fault(directory)
    assert at(fault) == (6, 12)
    assert fault.group("what").startswith("module db's manifest ")
    assert fault.group("what").endswith("catalogue/db/module.yaml is a directory")


def test_a_fifo_or_a_device_is_refused_without_being_opened(tmp_path):
    directory = meshdir(tmp_path, mesh_yaml=MESH + "ledger: pipe\n")
    os.mkfifo(directory / "pipe")  # opening it would wait for a writer forever
    fault = one_fault(directory)
    assert at(fault) == (6, 9) and fault.group("what").endswith("is not a regular file")
    directory = meshdir(tmp_path / "2", mesh_yaml=MESH + "ledger: /dev/zero\n")
    assert one_fault(directory).group("what").endswith("is not a regular file")


@contextlib.contextmanager
def as_nobody():
    """Drop the effective uid (root reads everything) for the permission checks."""
    if os.geteuid() != 0:
        yield
        return
    os.seteuid(65534)
    try:
        yield
    finally:
        os.seteuid(0)


def test_permission_denied_is_a_fault_at_the_key_that_named_the_path():
    root = Path(tempfile.mkdtemp(prefix="mesh-perm-"))  # traversable by nobody, unlike tmp_path
    try:
        root.chmod(0o755)
        directory = meshdir(root, mesh_yaml=MESH + "catalogue: catalogue\n")
        for path in [directory, *directory.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        (directory / "catalogue" / "web" / "module.yaml").chmod(0o000)
        (directory / "ledger.yaml").chmod(0o000)
        with as_nobody():
            found = faults(directory)
        assert [at(m) for m in found] == [(1, 1), (6, 12)]
        assert found[0].group("what").endswith("ledger.yaml cannot be read: Permission denied")
        assert "the default (no `ledger:` key)" in found[0].group("expected")
        assert found[1].group("what").endswith("module.yaml cannot be read: Permission denied")
        (directory / "catalogue").chmod(0o311)  # can enter, cannot list
        with as_nobody():
            found = faults(directory)
        assert at(found[1]) == (6, 12)
        assert "catalogue cannot be listed: Permission denied" in found[1].group("what")
    finally:
        shutil.rmtree(root)


def test_billion_laughs_under_an_unknown_key_is_refused_at_the_alias_before_expanding(tmp_path):
    fault = one_fault(meshdir(tmp_path, mesh_yaml=LAUGHS))
    # a holds 11 nodes, b 111, c 1,111; the aliases of b and c produce 110 + 1,110, and the
    # eighth *c of d brings the count to 10,108: the first alias past the limit
    assert at(fault) == (7, 10 + 4 * 7)
    assert fault.group("what") == "alias *c brings the nodes aliases produce to 10,108"
    assert fault.group("expected") == "at most 10,000 nodes produced by aliases"


def test_the_445_byte_document_that_expanded_to_ten_million_leaves(tmp_path):
    doc = "x: &x [" + ", ".join(["1"] * 10) + "]\n" + "".join(
        f"x{i}: &x{i} [{', '.join([f'*x{i - 1}' if i > 1 else '*x'] * 10)}]\n" for i in range(1, 7))
    assert len(doc) < 500
    with pytest.raises(InputError) as caught:
        load_mesh(doc, "mesh.yaml")
    (fault,) = caught.value.faults
    assert fault.line == 4 and "nodes produced by aliases" in fault.expected


def test_a_mesh_yaml_that_does_not_parse_says_so_once(tmp_path):
    directory = meshdir(tmp_path, mesh_yaml="mesh: home\ncatalogue: [unclosed\n")
    shutil.rmtree(directory / "catalogue")
    fault = one_fault(directory)
    assert fault.group("what").startswith("YAML: ")
    # and no second, position-less line about a catalogue the file does not name
    directory = meshdir(tmp_path / "2", mesh_yaml=b"mesh: home\nnodes: \xff\ncatalogue: cat\n")
    assert at(one_fault(directory)) == (2, 8)


def test_a_module_that_does_not_load_is_not_named_missing_again_by_a_build_base(tmp_path):
    built = ("name: tool\nartifacts:\n  tool: {build: ., base: [web/web]}\n"
             "containers:\n  - {name: tool, artifact: tool}\n")
    fault = one_fault(meshdir(tmp_path, catalogue__web__module_yaml=WEB + "oops: 1\n",
                              catalogue__tool__module_yaml=built))
    assert fault.group("what") == "unknown key 'oops'"  # and no "no artifact 'web/web'"


def test_a_catalogue_key_of_the_wrong_type_is_reported_once(tmp_path):
    fault = one_fault(meshdir(tmp_path, mesh_yaml=MESH + "catalogue: [a, b]\n"))
    assert at(fault) == (6, 12) and fault.group("what") == "catalogue is a list"


@pytest.mark.parametrize("raw, where", [
    (b"mesh: home\nnodes:\n  anchor: {address: 10.0.\xff.1}\n", (3, 26)),
    (b"mesh: h\xc3\xa9me\xe2\x82\nnodes: {}\n", (1, 11)),  # a multi-byte character cut short
    (b"mesh: home\r\nnodes: {}\r\n# caf\xe9\r\n", (3, 6)),  # latin-1
    ("mesh: home\n".encode("utf-16"), (1, 1)),
])
def test_a_file_that_is_not_utf8_is_reported_at_the_offending_byte(tmp_path, raw, where):
    fault = one_fault(meshdir(tmp_path, mesh_yaml=raw))
    assert at(fault) == where
    assert re.match(r"byte 0x[0-9a-f]{2} is not UTF-8", fault.group("what"))
    assert fault.group("expected") == "UTF-8 text"


def test_check_fails_on_a_default_naming_no_instance_and_says_which_codes_fail(tmp_path):
    mesh = MESH + "defaults:\n  http-api: ghost@anchor\n"
    code, lines, out = check(meshdir(tmp_path, mesh_yaml=mesh))
    assert code == 1
    problems = out.splitlines()
    assert problems[0].endswith("mesh.yaml:7:13: error [unknown-default] the mesh default for "
                                "http-api names ghost@anchor, which is not an instance of this mesh")
    assert problems[-1] == "1 error (unknown-default) fails the check"


def test_a_provides_naming_an_unknown_provision_is_a_located_problem(tmp_path):
    web = WEB + "provides:\n  - {provision: htp-api, listen: http}\n"
    code, _, out = check(meshdir(tmp_path, catalogue__web__module_yaml=web))
    assert code == 1
    assert re.search(r"catalogue/web/module\.yaml:10:17: error \[unknown-provision\] web@anchor "
                     r"provides 'htp-api', which provisions.yaml does not define", out), out
    web = WEB + "provides:\n  - {provision: http-api, listen: http}\n"
    assert check(meshdir(tmp_path / "2", catalogue__web__module_yaml=web))[0] == 0


def test_check_prints_warnings_and_says_they_do_not_fail_it(tmp_path):
    web = WEB + "requires:\n  - {as: api, provision: http-api, optional: true}\n"
    code, _, out = check(meshdir(tmp_path, catalogue__web__module_yaml=web))
    assert code == 0
    lines = out.splitlines()
    assert re.search(r"module\.yaml:10:5: warning \[no-provider\] web@anchor requires http-api",
                     lines[0]), lines
    assert lines[-1] == ("OK: 1 nodes, 1 instances, 1 modules; 1 warning (no-provider) does "
                         "not fail the check")
    mesh = MESH.replace("web@anchor: {module: web, node: anchor}",
                        "web@anchor: {module: web, node: anchor}\n  x@anchor: {module: nope, node: anchor}")
    code, _, out = check(meshdir(tmp_path / "2", mesh_yaml=mesh, catalogue__web__module_yaml=web))
    assert code == 1
    assert out.splitlines()[-1] == ("1 error (unknown-module) fails the check; 1 warning "
                                    "(no-provider) does not fail the check")


# --------------------------------------------------------------------------- every limit


def test_every_limit_is_named_in_the_schema_reference():
    schema = (REPO / "docs" / "schema.md").read_text()
    section = schema[schema.index("## Limits"):]
    for name, value in LIMITS.items():
        assert re.search(rf"\| {name} \| {value:,} ", section), (name, value)


def test_a_document_past_the_size_limit_is_refused_at_the_first_byte_past_it(tmp_path):
    limit = LIMITS["mesh and ledger document size"]  # mesh.yaml's (it grows with the mesh)
    body = "# " + "x" * 1000 + "\n"
    mesh = MESH + body * (limit // len(body) + 2)
    fault = one_fault(meshdir(tmp_path, mesh_yaml=mesh))
    line = mesh.encode()[:limit].count(b"\n") + 1
    assert at(fault) == (line, limit - mesh.encode()[:limit].rfind(b"\n"))
    assert fault.group("expected") == f"at most {limit:,} bytes (32 MiB) per document"


def test_a_module_past_its_own_size_limit_is_refused_at_the_first_byte_past_it():
    limit = LIMITS["document size"]
    doc = WEB + ("# " + "x" * 1000 + "\n") * (limit // 1003 + 2)
    with pytest.raises(InputError) as caught:
        load_module(doc, "module.yaml")
    (fault,) = caught.value.faults
    assert (fault.line, fault.col) == (doc.encode()[:limit].count(b"\n") + 1,
                                       limit - doc.encode()[:limit].rfind(b"\n"))
    assert fault.expected == f"at most {limit:,} bytes (2 MiB) per document"


def test_mesh_yaml_and_the_ledger_are_read_within_their_own_larger_limits():
    """A 10,000-instance mesh holds ~75,000 values: past a manifest's limit, within theirs
    (the limit itself is the one mechanism, checked at a manifest's size below)."""
    assert LIMITS["mesh and ledger values per document"] >= 20 * LIMITS["values per document"]
    count = LIMITS["values per document"] + 10
    doc = "version: 1\nlogins:\n" + "".join(f"  c{i}: u{i}\n" for i in range(count // 2))
    assert len(load_ledger(doc, "ledger.yaml")[0].logins) == count // 2
    with pytest.raises(InputError):
        parse_yaml(doc, "module.yaml")  # a manifest's limit


def test_too_many_values_are_refused_at_the_first_one_past_the_limit():
    limit = LIMITS["values per document"]
    doc = "version: 1\nlogins:\n" + "".join(f"  c{i}: u{i}\n" for i in range(limit))
    with pytest.raises(InputError) as caught:
        parse_yaml(doc, "module.yaml")  # a manifest's limit; mesh.yaml's and the ledger's above
    (fault,) = caught.value.faults
    # five values before the first login (the document, version, 1, logins, its mapping),
    # then two a line: value limit + 1 is the login u<k>
    k = (limit + 1 - 6) // 2
    assert (fault.line, fault.col) == locate(doc, f"u{k}\n")
    assert fault.message == f"more than {limit:,} values in one document"


def test_a_string_past_the_limit_is_refused_at_its_position():
    limit = LIMITS["string length"]
    doc = WEB.replace('tag: "1"', 'tag: "' + "1" * (limit + 1) + '"')
    with pytest.raises(InputError) as caught:
        load_module(doc, "module.yaml")
    (fault,) = caught.value.faults
    assert (fault.line, fault.col) == locate(doc, '"111')
    assert fault.message == f"a string of {limit + 1:,} characters"
    load_module(WEB.replace('tag: "1"', 'tag: "' + "1" * limit + '"'), "module.yaml")  # at it: fine


def test_an_alias_that_would_nest_past_the_depth_limit_is_refused_at_the_alias():
    doc = "a: &a " + "[" * 20 + "]" * 20 + "\nb: " + "[" * 15 + "*a" + "]" * 15 + "\n"
    with pytest.raises(InputError) as caught:
        parse_yaml(doc, "f.yaml")
    (fault,) = caught.value.faults
    assert (fault.line, fault.col) == (2, 19) and "alias *a nests deeper" in fault.message


# --------------------------------------------------------------------------- YAML that cannot be read


@pytest.mark.parametrize("doc, where, what", [
    ("a: &r [1, *r]\n", (1, 11), "alias *r refers to a node that contains it"),
    ("a: *nowhere\n", (1, 4), "alias *nowhere names no anchor before it"),
    ("a: !!binary aGVsbG8=\n", (1, 4), "tag !!binary is not read"),
    ("a: !!python/object:os.system x\n", (1, 4), "tag !!python/object:os.system is not read"),
    ("a: !!set {x}\n", (1, 4), "tag !!set is not read"),
    ("a: !!str {x: 1}\n", (1, 4), "tag !!str on a mapping"),
    ("a: !!int abc\n", (1, 4), "'abc' is not a whole number (tag !!int)"),
    ("? [a]\n: 1\n", (1, 3), "a mapping key that is a list"),
    ("k: &k {a: 1}\n*k : v\n", (2, 1), "a mapping key that is a mapping"),
    ("a: 1\nb: 2\na: 3\n", (3, 1), "duplicate key 'a' (first at line 1)"),
    ("a: 1\n---\na: 2\n", (2, 1), "a second document in the file"),
    ("%YAML 1.1\n---\na: yes\n", (2, 1), "YAML 1.1 is not read"),
    ("a: {<<: 3}\n", (1, 9), "<< merges a value (3)"),
    ("a:\n\tb: 1\n", (2, 1), "YAML: "),
    ("a: b\x00c\n", (1, 5), "YAML: character"),
])
def test_yaml_that_cannot_be_read_is_one_located_fault(doc, where, what):
    with pytest.raises(InputError) as caught:
        parse_yaml(doc, "f.yaml")
    (fault,) = caught.value.faults
    assert ((fault.line, fault.col), fault.message[:len(what)]) == (where, what)
    assert fault.expected


def test_every_duplicate_key_is_reported_at_once():
    with pytest.raises(InputError) as caught:
        parse_yaml("a: 1\nb: 2\na: 3\nb: 4\n", "f.yaml")
    assert [(f.line, f.message) for f in caught.value.faults] == [
        (3, "duplicate key 'a' (first at line 1)"), (4, "duplicate key 'b' (first at line 2)")]


def test_what_yaml_12_plain_values_are():
    data, _ = parse_yaml("a: [1, 0x1F, 0o17, 1_000, -0, 1.5, .inf, true, false, null, ~, '',"
                         " yes, no, on, _, 0x, 2001-12-14, <<, '3']\n", "f.yaml")
    assert data["a"][:11] == [1, 31, 15, 1000, 0, 1.5, float("inf"), True, False, None, None]
    assert data["a"][11:] == ["", "yes", "no", "on", "_", "0x", "2001-12-14", "<<", "3"]


def test_merge_keys_merge_and_an_explicit_key_wins():
    data, where = parse_yaml("base: &b {port: 1, protocol: udp}\nfloor:\n  <<: *b\n  port: 2\n",
                             "f.yaml")
    assert data["floor"] == {"port": 2, "protocol": "udp"}
    assert where.position(("floor", "protocol")) == (1, 30)  # where the merged value is written


def test_an_anchor_may_be_redefined_and_an_alias_takes_the_latest():
    data, _ = parse_yaml("a: &x 1\nb: &x 2\nc: *x\n", "f.yaml")
    assert data == {"a": 1, "b": 2, "c": 2}


def test_an_aliased_value_is_shared_never_copied():
    data, _ = parse_yaml("a: &x {k: [1, 2]}\nb: *x\nc: *x\n", "f.yaml")
    assert data["b"] is data["a"] and data["c"] is data["a"]


# --------------------------------------------------------------------------- from the harness


def test_dates_and_digitless_numbers_are_text_not_a_crash(tmp_path):
    """The old loader built a datetime from `2001-13-45` (ValueError: month must be in
    1..12) and an int from `_` (IndexError)."""
    mesh = MESH.replace("10.0.0.1", "2001-13-45") + "defaults: {_: _}\n"
    found = faults(meshdir(tmp_path, mesh_yaml=mesh))
    assert [at(m) for m in found] == [locate(mesh, "2001-13-45")]
    assert found[0].group("what") == "'2001-13-45' is not an IP address"


def test_a_certificate_time_that_is_not_a_time_is_a_load_fault_not_a_plan_crash():
    """`mesh plan` compares certificate times with now; a hand-edited `not-after` used to end
    it with a position-less `mesh: '…' is not a time`."""
    doc = LEDGER + ("certificates:\n  anchor: {serial: '1', not-before: 2026-01-01T00:00:00Z,"
                    " not-after: 2026-13-01T00:00:00Z, pem: x}\n")
    with pytest.raises(InputError) as caught:
        load_ledger(doc, "ledger.yaml")
    (fault,) = caught.value.faults
    assert (fault.line, fault.col) == locate(doc, "2026-13")
    assert fault.message == "not-after '2026-13-01T00:00:00Z' is not a valid time"


@pytest.mark.parametrize("url, what", [
    ("pg://{host", "the url template cannot be read (expected '}' before end of string)"),
    ("pg://{host:{port}", "the url template cannot be read (unmatched '{' in format spec)"),
    ("pg://{host:>999999999}", "url template field {host} has a format spec or conversion"),
    ("pg://{host.__class__}", "url template names {host.__class__}, not one of its keys"),
])
def test_a_url_template_that_str_format_would_refuse_is_a_load_fault(tmp_path, url, what):
    """Found by the harness: an unbalanced brace ended `mesh check` in a ValueError from
    str.format_map; a format spec could ask it for a gigabyte of padding."""
    provisions = PROVISIONS + f'  url: "{url}"\n'
    web = WEB + "requires:\n  - {as: api, provision: http-api}\n"
    fault = one_fault(meshdir(tmp_path, catalogue__provisions_yaml=provisions,
                              catalogue__web__module_yaml=web))
    assert at(fault) == (3, 8) and fault.group("what") == what


def test_control_characters_never_break_a_fault_or_a_problem_onto_two_lines(tmp_path):
    """Found by the harness: U+2028 or U+0085 in a value split the printed fault, and an
    escape sequence could drive the operator's terminal; each is printed as its escape."""
    web = WEB.replace("port: 8080", "port: 8080, container: \"w\\u2028e\\x1b[2Jb\"")
    fault = one_fault(meshdir(tmp_path, catalogue__web__module_yaml=web))
    assert "no container named 'w\\u2028e\\x1b[2Jb'" in fault.group("what")
    web = WEB.replace('tag: "1"', 'tag: "1\\x85\\u202e"')
    code, _, out = check(meshdir(tmp_path / "2", catalogue__web__module_yaml=web))
    lines = out.split("\n")  # exactly the line feeds printed
    assert code == 1 and len(lines) == 3 and lines[2] == ""
    assert "(mesh-test/busybox:1\\x85\\u202e)" in lines[0]


def test_the_check_never_prints_a_traceback_as_a_subprocess(tmp_path):
    directory = meshdir(tmp_path, mesh_yaml=LAUGHS.replace("mesh: home", "mesh: " + "x" * 70_000))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run([sys.executable, "-m", "executors.cli", "check", str(directory)],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[0].endswith(
        "mesh.yaml:1:7: a string of 70,000 characters; expected at most 65,536 characters")


def test_limits_are_checked_on_bytes_the_executor_reads_no_more_than_needed(tmp_path):
    directory = meshdir(tmp_path)
    big = directory / "ledger.yaml"
    with open(big, "wb") as handle:  # sparse: 64 MiB, never read whole
        handle.truncate(64 * 1024 * 1024)
    fault = one_fault(directory)
    assert fault.group("file").endswith("ledger.yaml")
    limit = LIMITS["mesh and ledger document size"]  # the ledger's (it grows with the mesh)
    assert fault.group("what") == f"the document goes on past {limit:,} bytes here"
    assert stat.S_ISREG(big.stat().st_mode)


# --------------------------------------------------------------------------- lone surrogates

def test_a_lone_surrogate_escape_in_a_module_is_a_located_fault(tmp_path):
    """An escape such as \\ud800 with no pair makes a string no UTF-8 file, digest or container
    environment can carry: it was read without complaint and crashed the digest with a
    UnicodeEncodeError. It is refused where it is written."""
    web = WEB + '    env: {NAME: "web\\ud800"}\n'
    fault = one_fault(meshdir(tmp_path, catalogue__web__module_yaml=web))
    assert at(fault) == locate(web, '"web\\ud800"')
    assert "lone surrogate" in fault.group("what")


def test_a_declaration_with_a_lone_surrogate_is_refused_by_apply_without_a_traceback(tmp_path):
    """The node side reads declarations as JSON: the same escape there is a located fault and
    exit 2, not a traceback from the digest it recomputes."""
    declaration = tmp_path / "node.json"
    text = '{"mesh": "home", "node": "anchor\\ud800", "address": "10.0.0.1"}\n'
    declaration.write_text(text)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run([sys.executable, "-m", "executors.cli", "apply", "--dry-run",
                             "--no-firewall", "--state-root", str(tmp_path / "state"),
                             str(declaration)],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    fault = next(FAULT_LINE.match(line) for line in result.stderr.splitlines()
                 if FAULT_LINE.match(line))
    assert fault.group("file") == str(declaration) and at(fault) == locate(text, '"anchor')
    assert "lone surrogate" in fault.group("what")
