"""How `mesh verify` reads the Docker Engine's answer to a registry login: a refusal of the
account (auth-failed) or anything else (unreachable). The texts are the Engine's own, taken from
Docker Engine 20.10 answering `POST /auth` (it answers 500 for both and names the registry's
answer in the message); the registry's address is part of them, so digits in a port and words in
a host name must not be read as the refusal (a closed port 40101 was once reported auth-failed)."""

from __future__ import annotations

import pytest

from executors.node.verify.registry import refused_by_registry

REFUSED = 'login attempt to http://{r}/v2/ failed with status: 401 Unauthorized'
TOKEN_REFUSED = 'Get "https://{r}/v2/": unauthorized: incorrect username or password'
AUTH_REQUIRED = 'Get "https://{r}/v2/": unauthorized: authentication required'
CLOSED = 'Get "http://{r}/v2/": dial tcp {ip}:{port}: connect: connection refused'
NO_HOST = 'Get "https://{r}/v2/": dial tcp: lookup {host} on 127.0.0.53:53: no such host'
BAD_CA = ('Get "https://{r}/v2/": x509: certificate signed by unknown authority')
TIMEOUT = ('Get "https://{r}/v2/": net/http: request canceled while waiting for connection '
           '(Client.Timeout exceeded while awaiting headers)')

REGISTRIES = [("127.0.0.1", 5000), ("127.0.0.1", 40101), ("127.0.0.1", 401), ("10.4.0.1", 4010),
              ("reg401.lan", 5000), ("unauthorized.lan", 5000), ("[fd00::401]", 8401)]


def text(template: str, host: str, port: int) -> str:
    registry = f"{host}:{port}"
    return template.format(r=registry, ip=host.strip("[]"), port=port, host=host)


@pytest.mark.parametrize("host,port", REGISTRIES)
@pytest.mark.parametrize("template", [REFUSED, TOKEN_REFUSED, AUTH_REQUIRED])
def test_the_registry_refusing_the_account_is_a_refusal(template, host, port):
    assert refused_by_registry(text(template, host, port), f"{host}:{port}", 500)


@pytest.mark.parametrize("host,port", REGISTRIES)
@pytest.mark.parametrize("template", [CLOSED, NO_HOST, BAD_CA, TIMEOUT])
def test_a_registry_out_of_reach_is_never_a_refusal_whatever_its_address(template, host, port):
    assert not refused_by_registry(text(template, host, port), f"{host}:{port}", 500)


def test_an_engine_answering_401_itself_is_a_refusal():
    assert refused_by_registry("unauthorized: incorrect username or password", "r:5000", 401)
    assert refused_by_registry("", "r:5000", 401)
    assert not refused_by_registry("", "r:5000", 500)
    assert not refused_by_registry("", "r:5000", None)
