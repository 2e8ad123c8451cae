"""ThoroughInterval: how many dirty pages a periodic flush or commit pass waits for.

RocketMQ's rule (CommitLog.FlushRealTimeService.run with flushPhysicQueueThoroughInterval,
CommitLog.CommitRealTimeService.run with commitDataThoroughInterval,
DefaultMessageStore.FlushConsumeQueueService.doFlush with flushConsumeQueueThoroughInterval):
a pass writes only when at least its least-pages setting is pending, except that a pass at least
`interval_ms` after the last such one writes everything.
"""

from __future__ import annotations

import time


class ThoroughInterval:
    def __init__(self) -> None:
        self._last_ms = 0  # monotonic ms of the last pass that wrote everything

    def least_pages(self, least_pages: int, interval_ms: int) -> int:
        """This pass's page threshold: `least_pages`, or 0 (everything) once `interval_ms` has passed."""
        now = int(time.monotonic() * 1000)
        if now >= self._last_ms + interval_ms:
            self._last_ms = now
            return 0
        return least_pages
