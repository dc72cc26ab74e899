"""Local test mode: run one job from ``--test_input`` or ``test_input.json``.

The job goes through the same :class:`~slotworker.worker.job_runner.JobRunner` as in
production; only the platform is replaced by :class:`LocalResults`, which
keeps what the runner would have posted.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Any, Dict, List, Optional

from ..config import Options
from ..worker.interruption import Registry, Watchdog
from ..worker.job_runner import JobRunner
from ..worker.lifecycle import Lifecycle

log = logging.getLogger("slotworker")


class LocalResults:
    """Stands in for the platform client: records the bodies a job posts."""

    def __init__(self) -> None:
        self.final: Optional[Dict[str, Any]] = None
        self.stream: List[Any] = []
        self.progress: List[Any] = []

    def post_done(self, job_id: str, body: bytes, is_stream: bool, timeout: object = None) -> None:
        data = json.loads(body)
        if data.get("status") == "IN_PROGRESS":
            self.progress.append(data.get("output"))
            log.info("progress: %s", data.get("output"), extra={"job_id": job_id})
        else:
            self.final = data

    def post_stream(self, job_id: str, body: bytes, timeout: object = None) -> None:
        chunk = json.loads(body).get("output")
        self.stream.append(chunk)
        log.info("stream: %s", json.dumps(chunk, ensure_ascii=False), extra={"job_id": job_id})


def load_test_job(rp_args: Dict[str, Any], cwd: str = ".") -> Optional[Dict[str, Any]]:
    """The local job: ``--test_input``, else ``test_input.json``; None if neither."""
    if rp_args.get("test_input") is not None:
        log.info("test_input set, using it as the job input")
        return rp_args["test_input"]
    path = os.path.join(cwd, "test_input.json")
    if not os.path.exists(path):
        return None
    log.info("using test_input.json as the job input")
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def run_local(options: Options) -> int:
    """Run the one local job, print its result; returns the exit code."""
    rp_args = options.flags
    try:
        job = load_test_job(rp_args)
    except ValueError as exc:
        log.error("test_input.json is not valid JSON: %s", exc)
        return 1
    if job is None:
        log.error("no test input: pass --test_input '{\"input\": ...}' or create test_input.json")
        return 1
    if not isinstance(job, dict) or job.get("input") is None:
        log.error("the test job has no input parameter; unable to run")
        return 1
    job.setdefault("id", "local_test")
    # Locally the stream is the result a developer wants to see.
    options = dataclasses.replace(options, return_aggregate_stream=True)
    sink = LocalResults()
    watchdog = Watchdog()
    runner = JobRunner(options, sink, Registry(), watchdog, Lifecycle(),  # type: ignore[arg-type]
                       on_refresh=lambda job_id: None)
    runner.run(job)
    watchdog.close()
    result = sink.final
    if result is None:
        log.error("the job produced no result")
        return 1
    print(json.dumps(result, ensure_ascii=False, indent=2), flush=True)
    if result.get("error"):
        log.error("job %s failed", job["id"])
        return 1
    log.info("job %s completed successfully", job["id"])
    expected = rp_args.get("test_output")
    if expected is not None:
        if result != expected:
            log.error("job output does not match test_output: expected %s",
                      json.dumps(expected, ensure_ascii=False))
            return 1
        log.info("job output matches test_output")
    return 0
