"""`mesh verify`'s reading of Prometheus exposition (executors/node/provisioners/
metrics_probe.py `exposition_families`) against the text format, written out plainly:

- any exposition an exporter writes (families with or without `# HELP`/`# TYPE`, samples
  with or without labels and a timestamp, any float a sample may carry) is read as naming
  exactly its metric families, in order of first mention;
- text with no `# HELP`/`# TYPE` line and no sample line (an HTML page, a JSON document, an
  error text) names none, so it is never taken for an exporter.
"""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from executors.node.provisioners.metrics_probe import exposition_families

NAMES = st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,20}", fullmatch=True)
LABEL_NAMES = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,10}", fullmatch=True)
ANY_CHARACTER = st.one_of(st.sampled_from('}{"\\\n ,=#'), st.characters(codec="utf-8"))
LABEL_VALUES = st.text(ANY_CHARACTER, max_size=12).map(  # escaped as the format writes them
    lambda v: v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n"))
VALUES = st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(
    lambda v: "NaN" if v != v else ("+Inf" if v == float("inf") else
                                    "-Inf" if v == float("-inf") else repr(v))),
    st.integers(-10**12, 10**12).map(str))


@st.composite
def family(draw: st.DrawFn) -> tuple[str, list[str]]:
    name = draw(NAMES)
    lines = []
    if draw(st.booleans()):
        help_text = draw(st.text(ANY_CHARACTER, max_size=30))
        lines.append(f"# HELP {name} " + help_text.replace("\\", "\\\\").replace("\n", "\\n"))
    if draw(st.booleans()):
        lines.append(f"# TYPE {name} {draw(st.sampled_from(['gauge', 'counter', 'untyped']))}")
    for _ in range(draw(st.integers(0 if lines else 1, 3))):
        labels = draw(st.dictionaries(LABEL_NAMES, LABEL_VALUES, max_size=3))
        written = ("{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}") if labels \
            else ""
        stamp = f" {draw(st.integers(0, 2**42))}" if draw(st.booleans()) else ""
        lines.append(f"{name}{written} {draw(VALUES)}{stamp}")
    return name, lines


@given(st.lists(family(), min_size=1, max_size=6))
def test_any_exposition_names_exactly_its_families_in_order(families):
    text = "\n".join(line for _, lines in families for line in lines) + "\n"
    expected = tuple(dict.fromkeys(name for name, _ in families))
    assert exposition_families(text) == expected


HTML = st.lists(st.text(st.characters(blacklist_characters="\n"), max_size=30).map(
    lambda t: f"<p>{t}</p>"), max_size=5).map(
    lambda ps: "<html><body>" + "\n".join(ps) + "</body></html>")
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                    max_leaves=8).map(lambda v: json.dumps({"data": v}, indent=1))


@given(st.one_of(HTML, JSON))
def test_pages_that_are_not_exposition_name_no_family(text):
    assert exposition_families(text) == ()
