"""What an operator reads when the broker cannot be reached: the cause under pika's
wrappers (refused, reset, timed out), not only the wrapper's name."""

from __future__ import annotations

import socket

import pytest

from executors.common import amqp


def test_a_refused_connection_says_refused():
    with socket.socket() as holder:  # bound, never listening: a connect is refused
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
        params = amqp.parameters(amqp.BrokerAddress("127.0.0.1", port), "/", "u", "p",
                                 tls=amqp.BrokerTls.plain(), timeout=2)
        with pytest.raises(amqp.BrokerError) as caught:
            amqp.connect(params)
    text = str(caught.value)
    assert text.startswith(f"127.0.0.1:{port}: AMQPConnectionError")
    assert "Connection refused" in text, text


def test_a_wrapper_with_no_text_of_its_own_is_followed_to_its_cause():
    class Wrapper(Exception):
        def __init__(self, inner):
            super().__init__()
            self.exception = inner

    assert amqp.describe(Wrapper(ConnectionResetError(104, "Connection reset by peer"))) == \
        "Wrapper < ConnectionResetError: [Errno 104] Connection reset by peer"
    assert amqp.describe(ValueError("bad frame")) == "ValueError: bad frame"
    assert amqp.describe(ValueError()) == "ValueError"
