"""The console's worker-side views: the workers now, and the timeline of
jobs in progress and takes over the last minutes.

A worker's slot count is not in the protocol. It is estimated from its
takes: a worker asks for its free slots, so the jobs it held in progress
when it asked plus how many it asked for is its slot count. One take can
come out low (a job's result reaches the platform a moment before the
worker frees its slot, so the platform counts one job fewer than the
worker does), never high; the estimate is therefore the highest over the
worker's recent takes. It is too high for a worker that takes ahead of its
slots (the `lookahead` take policy), or that gives a slot back while its
job's result is still on its way (slotworker's ``post_backlog``): the
platform counts that job as held.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional

from ..state import JobStore, RequestRecord
from .activity import Activity

#: The timeline's window, seconds: default and most.
WINDOW_DEFAULT = 60.0
WINDOW_MAX = 900.0
#: Points of in-progress series per answer, over all workers (each worker's
#: series may hold up to twice its share, see `Activity.series`).
POINTS_MAX = 2000
#: Takes per answer (the most recent in the window).
TAKES_MAX = 1000
#: Workers per answer, the busiest first.
WORKERS_MAX = 16
#: The slot estimate of /console/workers looks at the takes of this many
#: last seconds (the timeline's at those in its window).
SLOTS_HORIZON = 60.0


def _rel(t: float, now: float) -> float:
    """A monotonic time as seconds relative to now (negative: in the past)."""
    return round(t - now, 4)


def _asked(take: RequestRecord) -> bool:
    # A take refused (fault, 503, bad batch size) never asked for anything.
    return take.requested > 0


def _slots(activity: Activity, take: RequestRecord) -> Optional[int]:
    held = activity.held_at(take.worker_id, take.t_start)
    return None if held is None else held + take.requested


def slot_estimates(activity: Activity, takes: List[RequestRecord]) -> Dict[str, int]:
    """Each worker's slot estimate: the highest `held + asked` over `takes`."""
    best: Dict[str, int] = {}
    for take in takes:
        slots = _slots(activity, take)
        if slots is not None and slots > best.get(take.worker_id, 0):
            best[take.worker_id] = slots
    return best


def workers_view(store: JobStore, platform_info: Dict[str, Any]) -> Dict[str, Any]:
    """Queue depth, counters, and each worker: in progress now, slot estimate, last seen."""
    now = time.monotonic()
    counts = store.counts()
    seen = store.workers()
    last_take: Dict[str, RequestRecord] = {}
    recent: List[RequestRecord] = []
    for take in reversed(store.recent_takes()):
        if not _asked(take):
            continue
        if take.worker_id not in last_take:
            last_take[take.worker_id] = take
        if now - take.t_end <= SLOTS_HORIZON:
            recent.append(take)
        elif len(last_take) == len(seen):
            break
    changes, held_now = store.activity()
    since = min((t.t_start for t in recent), default=now)
    estimates = slot_estimates(Activity(changes, held_now, since), recent)
    # Workers holding jobs first, then the most recently seen.
    order = sorted(seen.items(), key=lambda kv: (kv[1][1] == 0, -kv[1][0]))
    workers: List[Dict[str, Any]] = []
    for worker, (last_seen, held) in order[:WORKERS_MAX]:
        take = last_take.get(worker)
        workers.append({
            "id": worker,
            "inProgress": held,
            "slotsEstimate": estimates.get(worker),
            "lastSeenS": round(now - last_seen, 3) if last_seen else None,
            "lastTakeS": round(now - take.t_end, 3) if take is not None else None,
        })
    return {
        "queue": {"jobs": counts["queued"], "raw": counts["raw_queued"], "waitingTakes": counts["waiting_takes"]},
        "counts": {k: counts[k] for k in ("submitted", "queued", "in_progress", "completed", "failed",
                                         "cancelled", "requeued", "takes")},
        "workers": workers,
        "workersTotal": len(seen),
        "platform": platform_info,
    }


def timeline_view(store: JobStore, window: float) -> Dict[str, Any]:
    """Jobs in progress per worker over the last `window` seconds, and the takes in it.

    Times are seconds relative to now (negative). Each take carries the jobs
    its worker held when it asked; a worker's slot estimate is the highest
    `held + asked` over its takes in the window.
    """
    now = time.monotonic()
    start = now - window
    recent: List[RequestRecord] = []
    truncated = False
    for take in reversed(store.recent_takes()):
        if take.t_end < start:
            break
        if not _asked(take):
            continue
        if len(recent) == TAKES_MAX:
            truncated = True
            break
        recent.append(take)
    recent.reverse()
    changes, held_now = store.activity()
    since = min([start] + [t.t_start for t in recent])
    activity = Activity(changes, held_now, since)

    names = activity.workers()
    for take in recent:
        if take.worker_id not in names:
            names.append(take.worker_id)
    # The busiest workers when there are too many to draw.
    if len(names) > WORKERS_MAX:
        busy = {w: len(activity.times.get(w, ())) + held_now.get(w, 0) for w in names}
        names = sorted(names, key=lambda w: -busy[w])[:WORKERS_MAX]
    per_worker = max(2, POINTS_MAX // max(1, len(names)))
    estimates = slot_estimates(activity, recent)
    workers = [{
        "id": w,
        "points": [[_rel(t, now), n] for t, n in activity.series(w, start, now, per_worker)],
        "inProgress": held_now.get(w, 0),
        "slotsEstimate": estimates.get(w),
    } for w in names]
    shown = set(names)
    return {
        "window": window,
        "knownFrom": _rel(activity.known_from, now) if activity.known_from > start else None,
        "workers": workers,
        "takes": [{
            "t": _rel(take.t_end, now),
            "startT": _rel(take.t_start, now),
            "worker": take.worker_id,
            "asked": take.requested,
            "given": take.given,
            "held": activity.held_at(take.worker_id, take.t_start),
        } for take in recent if take.worker_id in shown],
        "takesTruncated": truncated,
    }
