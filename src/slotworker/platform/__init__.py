"""The local platform: a real HTTP server on loopback that plays the RunPod
serverless platform, worker side (take, batch take, done, stream, ping, stop)
and client side (/run, /runsync, /status, /stream, /cancel, /health) on one
port, with a console in the browser at / and an API reference at /docs (see
`console`). Used by `--rp_serve_api`, by the tests and by the benchmarks.

    from slotworker.platform import Platform, Faults
    with Platform(take_cost=0.5) as p:
        env = p.worker_env("w1")
        job_id = p.submit({"prompt": "hi"})
        p.wait_final([job_id], timeout=30)

Choices where the protocol leaves room:
- `/stream/{id}` returns the chunks no earlier `/stream` call returned (one
  cursor per job, shared by all callers, as the hosted API does); `?all=1`
  returns every chunk so far. `status()` always lists every chunk.
- `set_down(s)`: worker-side requests answer 503 for `s` seconds.
- A job-done or job-stream post for an unknown job id answers 404 and is
  counted in `counts()["unknown"]`.
- A final result is accepted while the job is IN_PROGRESS or IN_QUEUE (its
  worker finished after a job-timeout requeue); the first one wins, later
  ones count as duplicates, and ones for a cancelled job as late.
- Garbage faults on a take or stop poll hand nothing out; on a post or a
  ping the request is processed and only the answer is garbage.
- An event is published just before its answer is written, so a client
  holding an answer always finds its event in `events`.
- The client API needs no Authorization; `api_key` guards the worker side.
"""

from __future__ import annotations

from .core import BindError, Platform
from .faults import WORKER_KINDS, Faults
from .state import RequestRecord, JobRecord

__all__ = ["Platform", "BindError", "Faults", "RequestRecord", "JobRecord", "WORKER_KINDS"]
