"""``RetryPolicy``: how often and how long a model service waits before trying a call again.

Exponential backoff with full jitter: before retry ``n + 1`` the wait is
``uniform(0, min(backoff_max, backoff_base * 2**n))``. A ``Retry-After`` the host sent replaces
the jittered wait; one longer than ``backoff_max`` is not waited for at all (``delay`` returns
``None``), so a task queue can reschedule the step instead of holding a worker.
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

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ConfigurationError(f"max_retries must be 0 or more, not {self.max_retries!r}")
        if self.backoff_base < 0 or self.backoff_max < 0:
            raise ConfigurationError(
                "backoff_base and backoff_max must be 0 or more, "
                f"not {self.backoff_base!r} and {self.backoff_max!r}"
            )
        self.max_retries = int(self.max_retries)
        self.backoff_base = float(self.backoff_base)
        self.backoff_max = float(self.backoff_max)

    def delay(self, attempt: int, retry_after: float | None) -> float | None:
        """Seconds to wait before retry ``attempt + 1``; ``None``: do not wait (Retry-After too long)."""
        if retry_after is not None:
            return retry_after if retry_after <= self.backoff_max else None
        ceiling = min(self.backoff_max, self.backoff_base * (2**attempt))
        return self.rng.uniform(0.0, ceiling)

    def can_retry(self, attempt: int) -> bool:
        """Whether a call that failed on attempt ``attempt`` (0-based) may be tried again."""
        return attempt < self.max_retries
