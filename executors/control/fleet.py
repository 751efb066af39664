"""The control plane's side of the broker: which accounts it keeps, and its own connection.

Invariants:
- The accounts wanted on the broker follow the control state alone: the control account, one
  account per node that was accepted (`accounts/`), one per enrolment token still open
  (issued or requested, not expired) or answered and not yet closed. Anything else of ours is deleted (fleet_broker).
- A password is handed to the broker only when an account is made (a new token, an accepted
  node) or for the control account, whose password the control state keeps.
- The control plane connects as its own account (never as the broker's admin, which has no
  rights in the mesh's vhost and is never given any) and declares the exchanges and queues
  there, idempotently.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Callable, Iterable, Optional, Sequence

from executors.common import amqp
from executors.common.amqp import FleetNames
from executors.common.broker_api import Api
from executors.control.broker_settings import BrokerSettings
from executors.control.control_state import ControlState, Document
from executors.control.fleet_broker import WantedAccount, ensure

if TYPE_CHECKING:  # pika ships no types: its objects are named for the reader
    from pika import ConnectionParameters
    from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection

OPEN = ("issued", "requested")
ANSWERED = ("accepted", "rejected")  # its account lives until the node took the answer


def token_open(token: Document, now: Optional[datetime.datetime] = None) -> bool:
    if token.get("state") not in OPEN:
        return False
    now = now or datetime.datetime.now(datetime.timezone.utc)
    try:
        expires = datetime.datetime.fromisoformat(str(token.get("expires")).replace("Z", "+00:00"))
    except ValueError:
        return False
    return now < expires


class Fleet:
    def __init__(self, mesh: str, settings: BrokerSettings, state: ControlState,
                 say: Callable[[str], None]):
        self.names = FleetNames(mesh)
        self.settings = settings
        self.state = state
        self.say = say

    def open_tokens(self) -> dict[str, Document]:
        """Tokens whose broker account must exist: open ones, and answered ones whose answer
        the node has not taken yet."""
        return {i: t for i, t in self.state.tokens().items()
                if token_open(t) or t.get("state") in ANSWERED}

    def wanted_accounts(self, extra: Sequence[WantedAccount] = (),
                        drop: Iterable[str] = ()) -> list[WantedAccount]:
        names, dropped = self.names, set(drop)
        wanted = {names.control_user: WantedAccount(names.control_user,
                                                    names.control_permissions(),
                                                    self.state.control_password())}
        for node in self.state.accounts():
            user = names.node_user(node)
            wanted[user] = WantedAccount(user, names.node_permissions(node))
        for token_id in self.open_tokens():
            user = names.enrol_user(token_id)
            wanted[user] = WantedAccount(user, names.enrol_permissions(token_id))
        for account in extra:
            wanted[account.user] = account
        return [a for user, a in sorted(wanted.items()) if user not in dropped]

    def ensure_accounts(self, extra: Sequence[WantedAccount] = (),
                        drop: Iterable[str] = ()) -> None:
        api = Api(self.settings.api, self.settings.admin, self.settings.admin_password,
                  ca_pem=self.settings.api_ca_pem)
        try:
            # the control state is read after each look at the broker (fleet_broker.ensure): an
            # account `mesh enrol` made for a token it recorded first is then always wanted
            ensure(api, self.names, lambda: self.wanted_accounts(extra, drop), say=self.say)
        finally:
            api.close()

    def parameters(self, heartbeat: int = 30) -> ConnectionParameters:
        return amqp.parameters(self.settings.amqp, self.names.vhost, self.names.control_user,
                               self.state.control_password(), tls=self.settings.tls,
                               heartbeat=heartbeat)

    def connect(self, *, deadline: Optional[float] = None,
                stop: Callable[[], bool] = lambda: False) -> BlockingConnection:
        """The control account's connection, retried with capped backoff until `deadline`."""
        return amqp.connect_retrying(self.parameters(), self.say, deadline=deadline, stop=stop)

    def declare(self, channel: BlockingChannel, nodes: Iterable[str]) -> None:
        amqp.declare_fleet(channel, sorted(nodes), sorted(self.open_tokens()))
