"""Exponential backoff, the one used wherever slotworker retries.

Takes, stop-channel polls, result posts and the local platform's webhooks all
wait ``first`` seconds after a failure, twice that after the next one, up to
``cap``, and start again from ``first`` after a success.
"""

from __future__ import annotations


class Backoff:
    """The waits between tries: ``first``, doubling per failure, at most ``cap``.

    Not thread-safe: each retry loop owns its own instance.
    """

    __slots__ = ("first", "cap", "_next")

    def __init__(self, first: float, cap: float) -> None:
        if first <= 0 or cap < first:
            raise ValueError(f"backoff needs 0 < first <= cap, got first={first}, cap={cap}")
        self.first = first
        self.cap = cap
        self._next = first

    def next(self) -> float:
        """The wait before the next try; the one after it doubles."""
        delay = self._next
        self._next = min(delay * 2, self.cap)
        return delay

    def reset(self) -> None:
        """A try succeeded: the next failure waits ``first`` again."""
        self._next = self.first

    def __repr__(self) -> str:
        return f"Backoff(first={self.first}, cap={self.cap}, next={self._next})"
