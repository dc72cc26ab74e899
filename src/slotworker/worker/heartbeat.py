"""The heartbeat thread: a ping every ``RUNPOD_PING_INTERVAL`` ms.

It keeps its pace from a deadline schedule rather than sleeping a fixed
interval after each ping, so slow pings or a busy GIL do not stretch it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, List, Optional

from .platform_client import PlatformClient, PlatformError

log = logging.getLogger("slotworker")


class Heartbeat:
    """Pings the platform with the ids of the jobs in progress."""

    def __init__(self, client: PlatformClient, interval: float, job_ids: Callable[[], List[str]]) -> None:
        self.client = client
        self.interval = interval
        self.job_ids = job_ids
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        """Start pinging (first ping at once)."""
        self._thread = threading.Thread(target=self._run, name="slotworker-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop pinging and wait briefly for the thread (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                status = self.client.ping(self.job_ids())
                if status >= 300:
                    log.warning("heartbeat answered %d", status)
            except PlatformError as exc:
                log.warning("heartbeat failed: %s", exc)
            next_at += self.interval
            now = time.monotonic()
            if next_at < now:  # fell behind (platform slow): skip, don't burst
                next_at = now + self.interval
            self._stop.wait(next_at - now)
