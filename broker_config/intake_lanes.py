"""Intake lanes: one intake list per group of tenants, so one tenant's burst does not hold another's.

The intake queue (``TANDEM_INTAKE_QUEUE``, ``celery`` by default) is FIFO: a tenant that submits
thousands of jobs at once puts every later tenant's intake message behind them, and admission
(docs/tenants.md) happens only once a worker reads that message. With ``TANDEM_INTAKE_LANES=N``
(1 to ``MAX_LANES``; unset or 0: off, exactly as before):

- tandem's submitters (``tandem.submit``, the HTTP API, ``tandem run``, a worker's child jobs and
  the reconciler's re-send of a lost intake message; everything that sends ``tandem.infer`` through
  an app made by ``celery_config``) send a job of tenant ``T`` to the lane
  ``<intake>.lane<i>``, ``i`` = ``lane_index(T, N)``, a hash of the tenant's name (``IntakeLanes``,
  a Celery router). A bare client that sends ``tandem.infer`` by name, and every control task
  (``tandem.decide``, ``resume``, ...), still use the intake queue itself;
- every worker that consumes the intake queue also consumes its ``N`` lanes, and its Redis channel
  takes them in turn (``LaneCycle``): after a message of one lane (or of the intake queue itself),
  the others with messages waiting come first. A burst in one lane then delays another lane's next
  message by at most one message per busy lane, not by the whole burst.

Lanes are by hash, not one per tenant, so that both sides know them from one number with nothing
to discover: two tenants may share a lane (and its FIFO) when their names hash alike (about
``k**2 / 2N`` such pairs among ``k`` tenants submitting at once); ``lane_index`` says which lane a
tenant takes. Clients and workers must agree on ``N``: a job sent to a lane no worker consumes
waits until the reconciler sends its intake message again (``TANDEM_STALL_SECONDS``), to the
worker's lane. Turn lanes on at the workers first, then at the clients.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kombu.utils.scheduling import priority_cycle

from tandem.broker_config.errors import SettingsError
from tandem.broker_config.tokens import DEFAULT_TENANT

MAX_LANES = 64
"""The most lanes: each lane adds ten lists (one per priority level) to every worker's ``BRPOP``."""
LANE_INFIX = ".lane"
"""Between the intake queue's name and a lane's number: ``celery.lane3``."""
_ROLE_QUEUES = ("thinker", "actor", "tools")  # ``celery_config.ROLE_QUEUES`` (which imports this module)
_INTAKE_TASK = "tandem.infer"


def read_intake(env: Mapping[str, str]) -> tuple[str, int]:
    """``TANDEM_INTAKE_QUEUE`` (``celery`` when unset) and ``TANDEM_INTAKE_LANES`` (0 when unset),
    checked: a bad value is a ``SettingsError`` naming the variable and the value."""
    queue = env.get("TANDEM_INTAKE_QUEUE", "").strip() or "celery"
    if queue in _ROLE_QUEUES:
        raise SettingsError(f"TANDEM_INTAKE_QUEUE={queue!r} clashes with a role queue: pick another name")
    raw = env.get("TANDEM_INTAKE_LANES", "").strip()
    if not raw:
        return queue, 0
    if not raw.isdigit() or int(raw) > MAX_LANES:
        raise SettingsError(
            f"TANDEM_INTAKE_LANES={raw!r} must be a whole number from 0 (no lanes) to {MAX_LANES} "
            "(e.g. 8), the same on every worker and client"
        )
    return queue, int(raw)


def is_intake(queue: str | None, intake: str) -> bool:
    """Whether ``queue`` is the intake queue ``intake`` or one of its lanes (any number)."""
    if queue is None:
        return False
    return queue == intake or (
        queue.startswith(intake + LANE_INFIX) and queue[len(intake) + len(LANE_INFIX) :].isdigit()
    )


def lane_index(tenant: str, lanes: int) -> int:
    """The lane of ``tenant`` among ``lanes``: the first 8 bytes of the SHA-256 of its UTF-8 name,
    big-endian, modulo ``lanes`` (stable across processes, releases and languages)."""
    digest = hashlib.sha256(tenant.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % lanes


@dataclass(frozen=True)
class IntakeLanes:
    """The intake queue and its ``count`` lanes; called, a Celery router (``task_routes``) that
    sends ``tandem.infer`` to its spec owner's lane (``None``, no opinion, for any other task)."""

    intake: str = "celery"
    count: int = 0

    @classmethod
    def of(cls, settings: Any) -> IntakeLanes:
        """The lanes of a ``Settings`` (its ``intake_queue`` and ``intake_lanes``)."""
        return cls(settings.intake_queue, settings.intake_lanes)

    @property
    def names(self) -> tuple[str, ...]:
        """The lanes' queue names (none when lanes are off)."""
        return tuple(f"{self.intake}{LANE_INFIX}{i}" for i in range(self.count))

    @property
    def queues(self) -> tuple[str, ...]:
        """Every queue a worker consuming intake consumes: the intake queue, then its lanes."""
        return (self.intake, *self.names)

    def lane(self, tenant: str | None) -> str:
        """The queue of ``tenant``'s intake messages (the intake queue when lanes are off)."""
        if not self.count:
            return self.intake
        return f"{self.intake}{LANE_INFIX}{lane_index(tenant or DEFAULT_TENANT, self.count)}"

    def __call__(
        self, name: str, args: Any, kwargs: Any, options: Any, task: Any = None, **_: Any
    ) -> dict[str, str] | None:
        """Celery's router call: ``{"queue": <lane>}`` for ``tandem.infer`` (by ``kwargs["spec"]
        ["owner"]``, ``default`` when it names none), ``None`` for any other task or without lanes."""
        if name != _INTAKE_TASK or not self.count:
            return None
        spec = kwargs.get("spec") if isinstance(kwargs, dict) else None
        owner = spec.get("owner") if isinstance(spec, dict) else None
        return {"queue": self.lane(owner if isinstance(owner, str) else None)}


class LaneCycle(priority_cycle):
    """The order a Redis channel asks its queues in (each ``BRPOP`` names them all, and Redis
    answers from the first list with a message): the order they were consumed in, as kombu's
    ``priority`` strategy keeps it (a role queue before the intake queue, at one priority level),
    except that the queues of ``rotated`` (the intake queue and its lanes) take turns among their
    places: the one a message just came from goes behind the others."""

    def __init__(self, rotated: Iterable[str], it: list[str] | None = None) -> None:
        super().__init__(it)
        self.rotated = frozenset(rotated)

    def rotate(self, last_used: str) -> str:
        """Move ``last_used``, if it is rotated, behind the other rotated queues."""
        if last_used in self.rotated:
            items = self.items
            places = [i for i, q in enumerate(items) if q in self.rotated]
            turn = [items[i] for i in places if items[i] != last_used] + [last_used]
            if len(turn) == len(places):
                for i, queue in zip(places, turn, strict=True):
                    items[i] = queue
        return last_used


__all__ = ["LANE_INFIX", "MAX_LANES", "IntakeLanes", "LaneCycle", "is_intake", "lane_index", "read_intake"]
