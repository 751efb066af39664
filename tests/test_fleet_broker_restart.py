"""The broker going away: restarted while a declaration is on its way, or not there when the
agent starts. A RabbitMQ node of the test's own, serving AMQP over TLS only with a certificate
from the mesh's CA (tests/_private_rabbit.py: the same Debian
package as the shared one, which other sessions' tests use and which is never restarted here);
one enrolled node applying to the real Docker Engine.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time

import pytest

from _fleet import APP, FleetMesh
from _private_rabbit import available

pytestmark = pytest.mark.integration

_why = available()
if _why:
    pytest.skip(f"private RabbitMQ: {_why}", allow_module_level=True)


@pytest.fixture
def fleet(tmp_path):
    rabbit = None
    fleet = None
    try:
        fleet = FleetMesh(tmp_path / "fleet", {"app@solo": ("app", "solo")})
        fleet.setup()
        # over TLS, as the mesh's broker serves it: a certificate from the mesh's CA
        rabbit = fleet.rabbit = fleet.tls_rabbit()
        fleet.enrol("solo")
        fleet.start_agent("solo")  # takes its enrolment answer, then serves
        yield fleet
    finally:
        if fleet is not None:
            for node in list(fleet.agents):
                process = fleet.agents[node]
                if process.poll() is None:
                    os.kill(process.pid, signal.SIGCONT)
            fleet.close()
        if rabbit is not None:
            rabbit.remove()


def greet(fleet, text):
    fleet.write_module("app", APP.replace("GREETING: hello", f"GREETING: {text}"))


def wait_applied(fleet, size: int) -> str:
    """The agent's log once it reports the current serial applied; on a timeout the
    private broker's own log goes with the agent's, to tell a broker that did not come back
    from an agent that did not reconnect."""
    try:
        return fleet.wait_log("solo", f"reported applied for serial {serial(fleet)}",
                              timeout=120, after=size)
    except AssertionError as error:
        raise AssertionError(f"{error}\nthe private broker:\n{fleet.rabbit.log_tail()}") \
            from None


def serial(fleet) -> int:
    return json.loads((fleet.dir / ".control" / "out" / "solo.declaration.json")
                      .read_text())["serial"]


def test_a_broker_restarted_between_publish_and_consume_delivers_it_afterwards(fleet):
    fleet.publish()
    assert fleet.collect().returncode == 0
    agent = fleet.agents["solo"]
    os.kill(agent.pid, signal.SIGSTOP)  # the agent takes nothing while the broker restarts
    greet(fleet, "after the restart")
    fleet.publish()
    size = fleet.log_size("solo")
    fleet.rabbit.stop()
    os.kill(agent.pid, signal.SIGCONT)
    fleet.wait_log("solo", "not reachable (attempt 3)", timeout=90, after=size)
    fleet.rabbit.start()
    log = wait_applied(fleet, size)[size:]
    assert "broker connection lost" in log
    delays = [int(d) for d in re.findall(r"retrying in (\d+)s", log)]
    assert delays[:3] == [1, 2, 4] and max(delays) <= 30, delays
    assert fleet.collect().returncode == 0
    assert fleet.env_of("app@solo")["GREETING"] == "after the restart"


def test_a_broker_not_there_at_agent_start_is_waited_for_and_nothing_is_applied_until_then(
        fleet):
    fleet.stop_agent("solo")
    fleet.publish()  # waits in the durable queue
    fleet.rabbit.stop()
    size = fleet.log_size("solo")
    agent = fleet.start_agent("solo", wait_for=None)
    fleet.wait_log("solo", "not reachable (attempt 4)", timeout=120, after=size)
    assert agent.poll() is None, "the agent exited while the broker was away"
    assert not (fleet.state("solo") / ".mesh" / "applied.json").exists()
    assert not fleet.api.containers(all=True, filters={"label": f"mesh.mesh={fleet.name}"})
    fleet.rabbit.start()
    wait_applied(fleet, size)
    assert fleet.collect().returncode == 0
    assert fleet.env_of("app@solo")["GREETING"] == "hello"
