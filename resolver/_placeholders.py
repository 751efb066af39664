"""Placeholders in env values, read in one place: `${<as>.<key>}`, `${self.…}`, `$$`, and the
`${secret:<credential id>}` tokens a resolved value carries for the executor to fill.

Invariants:
- One grammar, one reader (`parse_template`): `$$` is a literal `$`; `${` opens a placeholder
  whose body runs to the first `}`; an unclosed `${` is a PlaceholderSyntaxError; any other `$`
  is literal. The validator, the renderer and `render_placeholders` all read with it, so what
  validates is exactly what renders.
- A template is read once per distinct text and rendered once per instance: a tuple of
  literal strings and placeholder bodies split on `.` (a body is a tuple, a literal a str).
- One place says what a placeholder names (`meaning`): rendering compiles each module's env
  with it once, and fills the compiled form per instance.
- A secret token is the only thing a resolved value holds in place of a secret; executors
  replace it with `fill_secret_tokens` and nothing else reads one.
"""

from __future__ import annotations

import functools
import re
from typing import Callable, Collection, Union

from ._errors import PlaceholderSyntaxError

Body = tuple[str, ...]
"""A placeholder's body split on dots: `${db.host}` is ("db", "host")."""
Template = tuple[Union[str, Body], ...]
"""An env value read: literal strings and placeholder bodies, in order."""

ADDRESS = "address"
"""`${self.address}`: the address of the instance's node."""
INSTANCE = "instance"
"""`${self.instance}`: the instance's name."""
NODE = "node"
"""`${self.node}`: the name of the instance's node."""
NAMED = ("url", "hostname", "domain", "acme-email")
"""`${self.url}` (`https://<name>`) and `${self.hostname}` (`<name>`) of an instance with a web
name, `${self.domain}` the mesh domain, `${self.acme-email}` mesh.yaml's `acme` email ("" when
the names' certificates come from the mesh CA) (resolver/_names): read as a binding under the reserved
requirement name `self`, which rendering tells each instance. An unnamed instance whose module
provides an `http-route` is told where its web listen answers directly (`http://<node
address>:<published port>`, its node's address as hostname); otherwise "" (resolver/_names
own_names)."""
OWN_SECRET = "own-secret"
"""`${self.<secret>.password}` of a secret the module declares: the token of the instance's own
secret, which the container then refers to."""
OWN_PORT = "own-port"
"""`${self.<listen>.port}`: the host port assigned to the instance's listen; as written when the
listen has none."""
BINDING = "binding"
"""`${<as>.<key>}`: value `key` of the instance's binding for requirement `as` ("" when the
binding has no such value, or the requirement is optional and unbound); `<as>.password` also
makes the container refer to the binding's credential, when it carries one."""
LITERAL = "literal"
"""Text: any other `${self…}` is kept as written; any other `${<as>…}` (no key, or more than
one) says nothing and is ""."""
Meaning = tuple[str, str, str]
"""What a placeholder names: (kind, name, key): (ADDRESS | INSTANCE | NODE, "", ""),
(OWN_SECRET, secret, ""), (OWN_PORT, listen, the placeholder as written), (BINDING, as, key),
(LITERAL, text, "")."""

SECRET_TOKEN = "${{secret:{}}}"  # format with a credential id
_SECRET = re.compile(r"\$\{secret:([^}]*)\}")


def parse_template(value: str, *, strict: bool = True) -> Template:
    """`value` read as literal text and placeholder bodies; PlaceholderSyntaxError when a `${`
    is never closed (with `strict=False`, the unclosed rest is literal text, as rendering an
    unvalidated value has always read it)."""
    if "$" not in value:
        return (value,) if value else ()
    parts: list[Union[str, Body]] = []
    literal: list[str] = []
    i, size = 0, len(value)
    while i < size:
        at = value.find("$", i)
        if at < 0:
            literal.append(value[i:])
            break
        literal.append(value[i:at])
        if value.startswith("$$", at):
            literal.append("$")
            i = at + 2
        elif value.startswith("${", at):
            end = value.find("}", at + 2)
            if end < 0:
                if strict:
                    raise PlaceholderSyntaxError("an unclosed ${")
                literal.append(value[at:])
                break
            if literal:
                text = "".join(literal)
                if text:
                    parts.append(text)
                literal = []
            parts.append(tuple(value[at + 2:end].split(".")))
            i = end + 1
        else:
            literal.append("$")
            i = at + 1
    text = "".join(literal)
    if text:
        parts.append(text)
    return tuple(parts)


@functools.lru_cache(maxsize=4096)
def template(value: str) -> Template:
    """parse_template(value, strict=False), read once per distinct value: a module's env is
    rendered once per instance of it, and the same text need not be read again each time."""
    return parse_template(value, strict=False)


def meaning(body: Body, secrets: Collection[str]) -> Meaning:
    """What placeholder `body` names in an env value of a module declaring `secrets` (the
    validator refuses every body that is neither of the documented forms; these are what
    rendering makes of any body, validated or not)."""
    if body[0] == "self":
        if len(body) == 2 and body[1] in (ADDRESS, INSTANCE, NODE):
            return (body[1], "", "")
        if len(body) == 2 and body[1] in NAMED:
            return (BINDING, "self", body[1])
        if len(body) == 3 and body[2] == "password" and body[1] in secrets:
            return (OWN_SECRET, body[1], "")
        if len(body) == 3 and body[2] == "port":
            return (OWN_PORT, body[1], written(body))
        return (LITERAL, written(body), "")
    if len(body) == 2:
        return (BINDING, body[0], body[1])
    return (LITERAL, "", "")


def written(body: Body) -> str:
    """A placeholder as it is written: `${` + its body + `}`."""
    return "${" + ".".join(body) + "}"


def placeholders(value: str) -> list[str]:
    """The `${…}` bodies of an env value, in order (`$$` is a literal `$`)."""
    return [".".join(part) for part in parse_template(value) if not isinstance(part, str)]


def render_placeholders(value: str, lookup: Callable[[str], str]) -> str:
    """`value` with each `${body}` replaced by `lookup(body)` and `$$` by `$`."""
    return "".join(part if isinstance(part, str) else lookup(".".join(part))
                   for part in parse_template(value))


def secret_token(credential: str) -> str:
    """The token a resolved env value holds in place of credential `credential`'s value."""
    return SECRET_TOKEN.format(credential)


def fill_secret_tokens(value: str, lookup: Callable[[str], str]) -> str:
    """A resolved value with each `${secret:<id>}` token replaced by `lookup(<id>)` (the
    executor's half: it unseals the value); whatever `lookup` raises propagates."""
    if "${secret:" not in value:
        return value
    return _SECRET.sub(lambda match: lookup(match.group(1)), value)


def secret_tokens(value: str) -> list[str]:
    """The credential ids of the secret tokens in a resolved value, in order."""
    return _SECRET.findall(value)
