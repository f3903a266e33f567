"""``Attempts``: one model call's tries, held to the call's deadline.

A model service's ``timeout`` (``TANDEM_<ROLE>_TIMEOUT``) bounds **one call, all its attempts and
the waits between them included**: the first attempt gets the whole ``timeout``, each retry only
what is left, and a back-off that would leave no time for another attempt (less than
``MIN_ATTEMPT_SECONDS``) is not waited for: the call gives up with the last failure, which a
worker's step then reschedules as it does any transient failure (parked, holding no thread).

So a hung host holds a worker's step for ``timeout`` seconds at most, however many attempts
``max_retries`` allows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["MIN_ATTEMPT_SECONDS", "Attempts"]

MIN_ATTEMPT_SECONDS = 0.5
"""The least time worth starting another attempt with: a retry that would have less is not made."""


@dataclass
class Attempts:
    """The state of one call's attempts: which one runs (``number``, from 0), the seconds waited
    between them (``held``), whether the next one is made without streaming (``plain``), and the
    deadline ``timeout`` seconds after the call started (``clock``: injectable for tests)."""

    timeout: float
    clock: Callable[[], float] = time.monotonic
    number: int = 0
    held: float = 0.0
    plain: bool = False
    """True once a streamed attempt got no chunk at all: the next one asks for a plain reply."""
    deadline: float = field(init=False)

    def __post_init__(self) -> None:
        self.deadline = self.clock() + self.timeout

    def left(self) -> float:
        """Seconds left before the deadline (0 once it passed)."""
        return max(self.deadline - self.clock(), 0.0)

    def fits(self, wait: float) -> bool:
        """Whether waiting ``wait`` seconds still leaves time for another attempt."""
        return self.left() - wait >= MIN_ATTEMPT_SECONDS

    def next(self, wait: float) -> None:
        """Count the failed attempt and the ``wait`` before the next one."""
        self.number += 1
        self.held += wait

    def ran_out(self) -> str:
        """A sentence for errors: the call's time ran out, after how many attempts."""
        tries = self.number + 1
        return (
            f"The call's time ran out (timeout={self.timeout:g}s for all its attempts, "
            f"{tries} attempt{'' if tries == 1 else 's'} made): left to the caller."
        )
