"""The stop-channel thread: long-polls for jobs the platform wants stopped."""

from __future__ import annotations

import logging
import threading
import time
from typing import Optional

from ..backoff import Backoff
from .platform_client import PlatformClient, PlatformError, Throttled, THROTTLE_BACKOFF
from .interruption import Registry

log = logging.getLogger("slotworker")

#: An empty answer sooner than this is followed by a wait of the rest, so a
#: platform that does not hold the poll open is not asked in a tight loop.
POLL_FLOOR = 1.0
#: Waits after failed polls: the first, and the cap it doubles up to.
POLL_BACKOFF = (1.0, 30.0)


class StopChannel:
    """Stops exactly the jobs the platform names, leaving the others running."""

    def __init__(self, client: PlatformClient, registry: Registry) -> None:
        self.client = client
        self.registry = registry
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        """Start polling, or say once why the stop channel is off."""
        if self.client.settings.job_stop_url is None:
            log.warning("the job-take URL has no /job-take/; the stop channel is off for this worker")
            return
        self._thread = threading.Thread(target=self._run, name="slotworker-stopchannel", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop polling (the thread is a daemon; a poll in flight is not waited for)."""
        self._stop.set()

    def _run(self) -> None:
        backoff = Backoff(*POLL_BACKOFF)
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                ids = self.client.poll_stop()
            except Throttled:
                self._stop.wait(THROTTLE_BACKOFF)
                continue
            except PlatformError as exc:
                # A platform without the route, or down: not once a second forever.
                delay = backoff.next()
                log.warning("stop poll failed: %s; retrying in %.0fs", exc, delay)
                self._stop.wait(delay)
                continue
            backoff.reset()
            for job_id in ids:
                if self.registry.stop(job_id):
                    log.info("Stopping job.", extra={"job_id": job_id})
                else:
                    log.debug("stop asked for a job not running here", extra={"job_id": job_id})
            if not ids:
                self._stop.wait(max(0.0, POLL_FLOOR - (time.monotonic() - started)))
