"""``RetryPolicy``: how often and how long a model service waits before trying a call again.

Exponential backoff with full jitter: before retry ``n + 1`` the wait is
``uniform(0, min(backoff_max, backoff_base * 2**n))``. A ``Retry-After`` the host sent replaces
the jittered wait; one longer than ``backoff_max`` is not waited for at all (``delay`` returns
``None``), so a task queue can reschedule the step instead of holding a worker.

``max_hold`` bounds the waits of one call in total: a wait that would take them past it is not
slept either. A worker sets it small (``TANDEM_RETRY_HOLD_SECONDS``), so a call holds its
thread only for short pauses and anything longer parks the step, holding no thread; in-process
use leaves it ``None`` (the caller's own thread may wait as long as ``backoff_max`` allows).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tandem.reasoner.errors import ConfigurationError


@dataclass
class RetryPolicy:
    """Retries of transient model failures; ``sleep`` and ``rng`` are injectable for tests."""

    max_retries: int = 4
    backoff_base: float = 0.5
    backoff_max: float = 30.0
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)
    max_hold: float | None = None
    """Seconds one call may wait in all, over its retries; ``None``: no bound but ``backoff_max``."""

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ConfigurationError(f"max_retries must be 0 or more, not {self.max_retries!r}")
        if self.backoff_base < 0 or self.backoff_max < 0:
            raise ConfigurationError(
                "backoff_base and backoff_max must be 0 or more, "
                f"not {self.backoff_base!r} and {self.backoff_max!r}"
            )
        if self.max_hold is not None and not self.max_hold >= 0:
            raise ConfigurationError(f"max_hold must be 0 or more seconds (or None), not {self.max_hold!r}")
        self.max_retries = int(self.max_retries)
        self.backoff_base = float(self.backoff_base)
        self.backoff_max = float(self.backoff_max)
        self.max_hold = None if self.max_hold is None else float(self.max_hold)

    def delay(self, attempt: int, retry_after: float | None, held: float = 0.0) -> float | None:
        """Seconds to wait before retry ``attempt + 1``, the call having waited ``held`` seconds
        so far; ``None``: do not wait here (Retry-After over ``backoff_max``, or the wait would
        take the call past ``max_hold``)."""
        if retry_after is not None:
            if retry_after > self.backoff_max:
                return None
            wait = retry_after
        else:
            wait = self.rng.uniform(0.0, min(self.backoff_max, self.backoff_base * (2**attempt)))
        if self.max_hold is not None and held + wait > self.max_hold:
            return None
        return wait

    def refusal(self, retry_after: float | None, held: float) -> str:
        """Why ``delay`` gave ``None`` for a wait after ``held`` seconds (a sentence for errors)."""
        if retry_after is not None and retry_after > self.backoff_max:
            return (
                f"The host asks to retry after {retry_after:g}s, longer than "
                f"backoff_max ({self.backoff_max:g}s): not waited for here."
            )
        asked = "" if retry_after is None else f" (the host asks for {retry_after:g}s)"
        return (
            f"The next retry's wait{asked} would hold the call past retry_hold "
            f"({self.max_hold or 0:g}s in all, {held:g}s waited): left to the caller."
        )

    def can_retry(self, attempt: int) -> bool:
        """Whether a call that failed on attempt ``attempt`` (0-based) may be tried again."""
        return attempt < self.max_retries
