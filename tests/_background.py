"""An action repeated in a background thread while a block runs (a client dialling through a
rotation): started before the block, stopped and joined after it, however the block ends."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable, Iterator


@contextlib.contextmanager
def repeatedly(action: Callable[[], object], every: float = 0.05) -> Iterator[None]:
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            action()
            time.sleep(every)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(30)
