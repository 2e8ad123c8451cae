"""PeriodicPassService: a service that runs one pass every interval (the cleanup services).

`run_once()` is the pass; tests call it directly. `pause(seconds)` is the bounded wait a pass
takes between two deletions; shutdown ends it at once, so a pass never delays the store's
shutdown by more than the deletion in progress.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from core.service_thread import ServiceThread

log = logging.getLogger("tidemq.store")


class PeriodicPassService(ServiceThread):
    def __init__(self, name: str, interval_ms: int) -> None:
        super().__init__(name)
        self.interval_ms = interval_ms
        self._stop_event = threading.Event()

    def run_once(self) -> Any:
        raise NotImplementedError

    def wait_ms(self) -> int:
        """How long to wait before the next pass."""
        return self.interval_ms

    def pause(self, seconds: float) -> None:
        self._stop_event.wait(seconds)

    def shutdown(self) -> None:
        self._stop_event.set()
        super().shutdown()

    def run(self) -> None:
        while not self.is_stopped():
            self.wait_for_running(self.wait_ms())
            if self.is_stopped():
                break
            try:
                self.run_once()
            except Exception:  # one failed pass must not end cleanup for good
                log.exception("%s: pass failed", self.name)
