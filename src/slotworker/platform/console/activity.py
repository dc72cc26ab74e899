"""Jobs in progress per worker over time, from the store's change log.

`JobStore.activity()` keeps the last changes of each worker's in-progress
count as (time, worker, before, after). `Activity` answers "how many did
worker w hold at time t" from them, for the slot estimate of each take, and
cuts the log into per-worker step series for the console's chart.
"""

from __future__ import annotations

import bisect
from typing import Dict, List, Optional, Sequence, Tuple

from ..state import ACTIVITY_KEPT

Change = Tuple[float, str, int, int]


def first_at_or_after(changes: Sequence[Change], t: float) -> int:
    """Index of the first change at or after time `t` (changes are in time order)."""
    lo, hi = 0, len(changes)
    while lo < hi:
        mid = (lo + hi) // 2
        if changes[mid][0] < t:
            lo = mid + 1
        else:
            hi = mid
    return lo


class Activity:
    """The change log from time `since` on, indexed by worker.

    Only the changes from `since` on are looked at, so a request for the
    last minute does not walk the whole log.
    """

    def __init__(self, changes: Sequence[Change], held_now: Dict[str, int], since: float) -> None:
        self.held_now = held_now
        # When the log is full, changes older than its first were dropped:
        # counts before that time are not known.
        self.known_from = changes[0][0] if len(changes) >= ACTIVITY_KEPT else float("-inf")
        start = first_at_or_after(changes, since)
        self.times: Dict[str, List[float]] = {}
        self.befores: Dict[str, List[int]] = {}
        self.afters: Dict[str, List[int]] = {}
        for t, worker, before, after in changes[start:]:
            if worker not in self.times:
                self.times[worker], self.befores[worker], self.afters[worker] = [], [], []
            self.times[worker].append(t)
            self.befores[worker].append(before)
            self.afters[worker].append(after)

    def held_at(self, worker: str, t: float) -> Optional[int]:
        """Jobs `worker` held in progress just before time `t` (None: not known).

        The count before the worker's first change after `t`, or its count
        now if it has not changed since.
        """
        if t < self.known_from:
            return None
        times = self.times.get(worker, [])
        i = bisect.bisect_right(times, t)
        if i < len(times):
            return self.befores[worker][i]
        return self.held_now.get(worker, 0)

    def workers(self) -> List[str]:
        """Workers with a change in the indexed span or jobs in progress now."""
        names = dict.fromkeys(self.times)
        names.update(dict.fromkeys(w for w, n in self.held_now.items() if n))
        return list(names)

    def series(self, worker: str, start: float, end: float, points: int) -> List[Tuple[float, int]]:
        """The step series of `worker` over [start, end]: (time, count from then on).

        The first point is at `start`. With more changes than `points`, the
        span is cut into `points` equal buckets, each drawn at the highest
        count it saw (so peaks survive), followed by the count it ended
        with when the next bucket with a change is further on: at most
        2 * `points` points.
        """
        begin = self.held_at(worker, start)
        current = begin if begin is not None else 0
        times = self.times.get(worker, [])
        afters = self.afters.get(worker, [])
        i = bisect.bisect_right(times, start)
        j = bisect.bisect_right(times, end)
        steps = list(zip(times[i:j], afters[i:j]))
        if len(steps) < points:
            return [(start, current)] + steps
        width = (end - start) / points
        out: List[Tuple[float, int]] = []
        bucket, peak = 0, current
        for t, n in steps:
            b = min(points - 1, int((t - start) / width))
            if b != bucket:
                out.append((start + bucket * width, peak))
                if b > bucket + 1 and current != peak:
                    out.append((start + (bucket + 1) * width, current))
                bucket, peak = b, current
            current = n
            peak = max(peak, n)
        out.append((start + bucket * width, peak))
        if current != peak:
            out.append((min(end, start + (bucket + 1) * width), current))
        return out
