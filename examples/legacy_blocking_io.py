"""Legacy blocking I/O with ``requests``, 32 jobs at a time, no asyncio needed.

    python examples/legacy_blocking_io.py --test_input '{"input": {"calls": 3}}'
    python examples/legacy_blocking_io.py --rp_serve_api

Each job makes ``calls`` blocking ``requests.get`` calls to a slow backend (here
a tiny ``http.server`` on loopback that this script starts itself and that
answers each request after 0.2 s: no external network). Under runpod such a
handler blocks the event loop, one job at a time; here each job has its own
thread, and the concurrency modifier lets 32 run at once. Try it:

    for i in $(seq 32); do curl -s -X POST localhost:8000/run -d '{"input": {"calls": 5}}' & done; wait
"""

from __future__ import annotations

import http.server
import threading
import time
from typing import Any, Dict, Optional

import requests

import slotworker as runpod

CONCURRENCY = 32
BACKEND_DELAY = 0.2  # seconds the fake backend takes per request

_backend_url: Optional[str] = None
_session = threading.local()


class SlowBackend(http.server.BaseHTTPRequestHandler):
    """Answers every GET with a small JSON body after ``BACKEND_DELAY`` seconds."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        time.sleep(BACKEND_DELAY)
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


def start_backend() -> str:
    """Start the fake backend on a free loopback port; returns its URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), SlowBackend)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="fake-backend", daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def session() -> requests.Session:
    """One ``requests.Session`` per job thread: sessions are not thread-safe to share."""
    if not hasattr(_session, "value"):
        _session.value = requests.Session()
    return _session.value


def handler(job: Dict[str, Any]) -> Dict[str, Any]:
    """Make ``calls`` blocking calls to the backend, one after the other."""
    calls = int(job["input"].get("calls", 1))
    started = time.monotonic()
    answers = [session().get(f"{_backend_url}/item/{i}", timeout=10).json()["ok"] for i in range(calls)]
    return {"calls": calls, "all_ok": all(answers), "seconds": round(time.monotonic() - started, 3)}


if __name__ == "__main__":
    _backend_url = start_backend()
    runpod.serverless.start({"handler": handler, "concurrency_modifier": lambda current: CONCURRENCY})
