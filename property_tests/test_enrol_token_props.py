"""The enrolment token's rules (executors/common/enrol_token.py), as properties:

- every token round-trips (encode → decode is the identity), whatever its fields hold;
- the CA certificate a token carries is what the node verifies the broker against, so a token
  whose certificate is not the CA its fingerprint pins is refused, whichever other CA it
  carries and whatever else the token says;
- a token that says TLS is one whose transport is `amqps`; anything but the two transports
  is refused.
"""

from __future__ import annotations

import datetime

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyrsistent import pmap

from executors.common import enrol_token, messages
from executors.control.ca import ca_pem, init_ca
from resolver import Mesh, Node

NOW = datetime.datetime(2026, 6, 1, tzinfo=datetime.timezone.utc)


@pytest.fixture(scope="module")
def cas(tmp_path_factory):
    """Three meshes' CA certificates (PEM): the token's own and two others."""
    found = []
    for name in ("ours", "theirs", "third"):
        directory = tmp_path_factory.mktemp(name)
        mesh = Mesh(mesh=name, nodes=pmap({"n1": Node(address="10.0.0.1")}))
        found.append(ca_pem(init_ca(directory, mesh, now=NOW)))
    return found


names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1,
                max_size=30)


@st.composite
def tokens(draw, ca: str) -> enrol_token.EnrolToken:
    from cryptography import x509

    certificate = x509.load_pem_x509_certificate(ca.encode("ascii"))
    return enrol_token.EnrolToken(
        mesh=draw(names), node=draw(names),
        broker=draw(st.sampled_from(["10.0.0.9:5671", "[fd00::1]:5671", "broker.lan"])),
        vhost=draw(names), token_id=draw(st.text("0123456789abcdef", min_size=8, max_size=8)),
        secret=draw(names), ca_fingerprint=messages.certificate_fingerprint(certificate),
        expires=draw(names), ca_certificate=ca,
        transport=draw(st.sampled_from(enrol_token.TRANSPORTS)))


@given(data=st.data())
def test_every_token_round_trips(cas, data):
    token = data.draw(tokens(cas[0]))
    text = enrol_token.encode(token)
    assert enrol_token.decode(text) == token
    assert "\n" not in text and text.startswith(enrol_token.PREFIX)
    assert token.tls == (token.transport == "amqps")


@given(data=st.data(), other=st.sampled_from([1, 2]))
def test_a_token_carrying_another_cas_certificate_is_refused(cas, data, other):
    token = attrs.evolve(data.draw(tokens(cas[0])), ca_certificate=cas[other])
    with pytest.raises(enrol_token.TokenError, match="does not have the fingerprint it pins"):
        enrol_token.decode(enrol_token.encode(token))


@given(data=st.data(), transport=names)
def test_only_the_two_transports_are_understood(cas, data, transport):
    token = attrs.evolve(data.draw(tokens(cas[0])), transport=transport)
    if transport in enrol_token.TRANSPORTS:
        assert enrol_token.decode(enrol_token.encode(token)).transport == transport
    else:
        with pytest.raises(enrol_token.TokenError):
            enrol_token.decode(enrol_token.encode(token))
