"""Command line of the local platform: `python -m slotworker.platform` and
`slotworker platform` (which delegates to `main`)."""

from __future__ import annotations

import argparse
import logging
import shlex
import signal
import sys
import threading
from typing import List, Optional

from .core import BindError, Platform
from .faults import Faults


def build_parser(prog: str = "python -m slotworker.platform") -> argparse.ArgumentParser:
    """The argument parser (reused by `slotworker platform`)."""
    p = argparse.ArgumentParser(prog=prog, description="Serve the local RunPod-style platform on loopback.")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    p.add_argument("--port", type=int, default=8000, help="port (0: any free port)")
    p.add_argument("--endpoint", default="local", help="endpoint name in the worker URLs")
    p.add_argument("--api-key", default=None, help="require this Authorization on worker requests")
    p.add_argument("--take-cost", type=float, default=0.0, help="seconds every take costs (0.5 is the real platform)")
    p.add_argument("--long-poll", type=float, default=1.0, help="seconds a take or stop poll is held open")
    p.add_argument("--job-timeout", type=float, default=None, help="requeue a job silent for this many seconds")
    p.add_argument("--worker-id", default="w1", help="worker id in the printed environment")
    p.add_argument("--max-body", type=int, default=64 * 1024 * 1024, help="largest accepted body, bytes")
    g = p.add_argument_group("faults (worker-side routes only)")
    g.add_argument("--error-rate", type=float, default=0.0)
    g.add_argument("--throttle-rate", type=float, default=0.0)
    g.add_argument("--garbage-rate", type=float, default=0.0)
    g.add_argument("--drop-rate", type=float, default=0.0)
    g.add_argument("--drop-after-assign-rate", type=float, default=0.0)
    g.add_argument("--slow-rate", type=float, default=0.0)
    g.add_argument("--slow-seconds", type=float, default=0.0)
    g.add_argument("--seed", type=int, default=None)
    p.add_argument("--log-level", default="INFO", help="logging level")
    return p


def main(argv: Optional[List[str]] = None, prog: Optional[str] = None) -> int:
    """Serve until SIGINT or SIGTERM; print the worker environment first.

    `prog` names the command in usage messages (`slotworker platform`).
    Returns 1, after one line on stderr, when the address cannot be listened on."""
    parser = build_parser(prog) if prog else build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    faults = Faults(
        error_rate=args.error_rate,
        throttle_rate=args.throttle_rate,
        garbage_rate=args.garbage_rate,
        drop_rate=args.drop_rate,
        drop_after_assign_rate=args.drop_after_assign_rate,
        slow_rate=args.slow_rate,
        slow_seconds=args.slow_seconds,
        seed=args.seed,
    )
    any_fault = any((args.error_rate, args.throttle_rate, args.garbage_rate, args.drop_rate,
                     args.drop_after_assign_rate, args.slow_rate))
    platform = Platform(
        args.host,
        args.port,
        endpoint=args.endpoint,
        api_key=args.api_key,
        take_cost=args.take_cost,
        long_poll=args.long_poll,
        job_timeout=args.job_timeout,
        faults=faults if any_fault else None,
        max_body=args.max_body,
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            platform.start()
        except BindError as exc:
            # A port in use is the usual reason: one line naming it and the
            # flag to change, not the traceback of socketserver's bind.
            print(f"{parser.prog}: {exc.hint('--port', '--host')}", file=sys.stderr, flush=True)
            return 1
        print(f"# slotworker platform serving on {platform.url}", flush=True)
        for key, value in platform.worker_env(args.worker_id).items():
            print(f"export {key}={shlex.quote(value)}", flush=True)
        print(f"# console: {platform.url}/ (API reference: {platform.url}/docs)", flush=True)
        # The main thread stays in a short wait so that signals are handled.
        while not stop.wait(0.5):
            pass
    finally:
        platform.close()
        for s, h in previous.items():
            signal.signal(s, h)
    print("# slotworker platform stopped", file=sys.stderr, flush=True)
    return 0
