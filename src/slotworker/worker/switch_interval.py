"""The interpreter's thread switch interval, raised while a worker has many slots.

When a wave of jobs of one length ends, its job threads come back from their
handlers together and all want the GIL. In CPython each thread waiting for
the GIL wakes every switch interval (5 ms by default) to ask for it, so a
thousand of them wake 200,000 times a second, contending for the GIL's own
mutex with the thread that holds it. Now and then a wave tips into that
state and stays there: at 1,024 slots 6 bursts of 78 burnt two to six
times their CPU and ended up to half their time late, the sampled threads
waiting for the GIL right after the handler's ``time.sleep`` returned. With
the interval at 20 or 50 ms none of 64 did.

So a worker asks for :data:`PER_SLOT` seconds of switch interval per slot,
never less than the interval it found nor more than :data:`MOST`, and gives
it back when it stops: 32 slots keep the default, 1,024 get 50 ms. A
handler thread running pure Python then keeps the GIL up to that long before
another thread runs; threads that block (I/O, sleep, a GPU call that
releases the GIL) give it up at once, as before. The ``switch_interval``
option turns this off (0) or asks for a value of its own instead.

Workers in one process share the interpreter: the largest ask wins, and the
interval found first is put back when the last worker stops.
"""

from __future__ import annotations

import sys
import threading
from typing import Dict, Optional

#: Seconds of switch interval asked per slot (1,024 slots: 51 ms before the cap).
PER_SLOT = 50e-6
#: The most asked for by slot count: a thread running Python waits at most this for its turn.
MOST = 0.05

_lock = threading.Lock()
_asks: Dict[int, float] = {}  # id(owner) -> the interval it asks for
_found: Optional[float] = None  # the interval before the first ask, put back after the last


def for_slots(slots: int) -> float:
    """The interval a worker with ``slots`` slots asks for (before the one found is weighed in)."""
    return min(MOST, max(0, slots) * PER_SLOT)


def ask(owner: object, seconds: float) -> None:
    """Have at least ``seconds`` of switch interval while ``owner`` runs (replaces its last ask)."""
    global _found
    with _lock:
        if _found is None:
            _found = sys.getswitchinterval()
        _asks[id(owner)] = seconds
        _set_locked()


def give_back(owner: object) -> None:
    """``owner`` stops: its ask ends; after the last, the interval found is put back."""
    global _found
    with _lock:
        if _asks.pop(id(owner), None) is None:
            return
        _set_locked()
        if not _asks:
            _found = None


def _set_locked() -> None:
    """Set the largest of the interval found and the asks (hold ``_lock``; an ask was made)."""
    sys.setswitchinterval(max([_found or 0.0, *_asks.values()]))
