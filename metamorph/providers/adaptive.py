"""How many attempts a runner keeps in flight, adapted to a server that says it is overloaded.

:class:`AdaptiveLimit` starts at the provider's ``max_concurrency`` and follows TCP's congestion
control (additive increase, multiplicative decrease):

* a **throttle** (HTTP 429, 503 or 529) halves the limit, once per round: only an attempt that
  started after the last decrease can decrease it again, so a burst of 429s from the attempts
  that were already in flight counts once;
* a throttle that carries ``Retry-After`` also holds every new attempt until that time;
* each success raises the limit: by 1 while it is below the *threshold* (the limit after the last
  decrease; a doubling per round trip) and by ``1 / limit`` above it (1 per round trip), never
  above ``maximum``; after ``quiet_s`` seconds without a throttle the threshold returns to
  ``maximum``, so the limit doubles its way back.

The limit counts requests in progress, as the runner's worker threads did: a request keeps its
slot through the waits between its attempts, except after a throttle that left more slots held
than the lowered limit allows (:meth:`AdaptiveLimit.over`). It lives on one event loop (the
runner's) and is not thread-safe.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable

__all__ = ["THROTTLE_STATUSES", "AdaptiveLimit"]

#: HTTP statuses that mean "too many requests now": rate limited, unavailable, overloaded.
THROTTLE_STATUSES = frozenset({429, 503, 529})


class AdaptiveLimit:
    """A concurrency limit on requests in progress.

    A request holds a slot from its first attempt to its result (``await acquire()`` ...
    ``release()``), the waits between its attempts included, as a worker thread would; after a
    throttle, a request whose slot is over the lowered limit gives it up for its wait
    (:meth:`over`) and takes one again, ahead of requests not yet started
    (``acquire(priority=True)``), so what the server sees in flight falls to the limit.

    Args:
        maximum: the configured concurrency (>= 1); the limit never exceeds it.
        quiet_s: seconds without a throttle after which the threshold returns to ``maximum``.
        clock: monotonic clock in seconds.

    Attributes:
        limit: the current limit (a float; ``floor(limit)`` requests may hold a slot, at least 1).
        in_flight: slots held now.
        peak: the most slots ever held at once.
        decreases: how many times a throttle decreased the limit.
        round: how many decreases happened; read it when an attempt starts and pass it to
            :meth:`throttled`.
    """

    def __init__(self, maximum: int, quiet_s: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        if maximum < 1:
            raise ValueError(f"maximum must be >= 1, got {maximum}")
        self.maximum = maximum
        self.quiet_s = quiet_s
        self.clock = clock
        self.limit = float(maximum)
        self.threshold = float(maximum)
        self.in_flight = 0
        self.peak = 0
        self.decreases = 0
        self.round = 0
        self._resume_at = 0.0  # no request starts before this (Retry-After)
        self._throttled_at = -math.inf
        self._waiters: deque[asyncio.Future[None]] = deque()

    def _allowed(self) -> int:
        return max(1, int(self.limit))

    def over(self) -> bool:
        """Whether more slots are held than the limit allows now."""
        return self.in_flight > self._allowed()

    async def acquire(self, priority: bool = False) -> None:
        """Wait for a free slot and take it (``priority``: ahead of the waiting requests that
        asked without it); a request without priority also waits out a server's ``Retry-After``."""
        while True:
            wait = 0.0 if priority else self._resume_at - self.clock()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            if self.in_flight < self._allowed():
                break
            fut = asyncio.get_running_loop().create_future()
            if priority:
                self._waiters.appendleft(fut)
            else:
                self._waiters.append(fut)
            try:
                await fut
            finally:
                if not fut.done():
                    fut.cancel()
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)

    def release(self) -> None:
        """Give the slot back."""
        self.in_flight -= 1
        self._wake()

    def throttled(self, started_round: int, retry_after: float | None) -> None:
        """An attempt started in round ``started_round`` got a throttle status; ``retry_after``:
        the seconds the server asked for (``None``: it did not say)."""
        now = self.clock()
        self._throttled_at = now
        if started_round == self.round:
            self.threshold = max(1.0, self.limit / 2)
            self.limit = self.threshold
            self.round += 1
            self.decreases += 1
        if retry_after:
            self._resume_at = max(self._resume_at, now + retry_after)

    def succeeded(self) -> None:
        """An attempt returned a result."""
        if self.clock() - self._throttled_at >= self.quiet_s:
            self.threshold = float(self.maximum)
        step = 1.0 if self.limit < self.threshold else 1.0 / self.limit
        self.limit = min(float(self.maximum), self.limit + step)
        self._wake()

    def _wake(self) -> None:
        """Wake as many waiting requests as there are free slots (each checks again)."""
        free = self._allowed() - self.in_flight
        while free > 0 and self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                free -= 1
