"""The node agent's transfer server: serves the departures of the declaration in force.

Invariants:
- Follows the declaration the agent applied last: when its departures (instance, target,
  port, whether it waits for its certificates) change, the server for the old ones is closed before one for the new ones opens; a
  declaration with none closes it. The same departures keep the server running (a copy
  under way is not cut by a re-apply of the same move).
- Serves in a daemon thread, every attempt until the move leaves the declaration (a copy
  that breaks off is answered again from the beginning); never blocks the agent's loop.
- A server that cannot start (the port taken, the transfer certificate not written, every
  departure waiting for its certificates) is said, not raised: the arriving node's apply then
  fails and says its source does not serve.
"""

from __future__ import annotations

import threading
from typing import Callable, Optional

from resolver import Declaration, MeshError

from executors.node import docker_engine
from executors.node.node_paths import NodePaths, default_file_root
from executors.node.state_move.serve import Server, departures


class Departures:
    """One agent's transfer server, following its applied declaration."""

    def __init__(self, state_root: str, docker_host: Optional[str],
                 say: Callable[[str], None], file_root: Optional[str] = None):
        """`file_root`: where the agent's applies write declared files (default: as
        `mesh apply`'s, node_paths.default_file_root)."""
        self.state_root, self.docker_host, self.say = state_root, docker_host, say
        self.file_root = file_root or default_file_root()
        self.serving: tuple[tuple[str, str, int, str], ...] = ()
        self.server: Optional[Server] = None
        self.thread: Optional[threading.Thread] = None

    def follow(self, declaration: Declaration) -> None:
        wanted = tuple(sorted((t.instance, t.target, t.port, t.waits)
                              for t in departures(declaration)))
        if wanted == self.serving and (self.thread is None or self.thread.is_alive()):
            return
        self.close()
        if not wanted:
            return
        try:
            self.server = Server(declaration, NodePaths(self.state_root, self.file_root),
                                 docker_engine.connect(self.docker_host), self.say)
        except (MeshError, OSError) as exc:
            self.say(f"cannot serve the state of {', '.join(w[0] for w in wanted)}: {exc}")
            return
        self.serving = wanted
        self.thread = threading.Thread(target=self.server.serve, kwargs={"forever": True},
                                       name="mesh-agent-state-transfer", daemon=True)
        self.thread.start()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
        if self.thread is not None:
            self.thread.join(5)
        self.server, self.thread, self.serving = None, None, ()
