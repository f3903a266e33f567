"""The tenant gate's hooks in a worker: a job's end releases its slot (``END_HOOKS``, registered
when the worker imports its tasks, so in every pool process), and ``TenantSweeper`` runs
``TenantGate.sweep`` every few seconds (when tenant caps are set): it releases the slots of jobs
that ended where no gate saw it (a client's cancel), starts admitted jobs a killed worker left
unstarted, and admits waiting jobs into free slots."""

from __future__ import annotations

from typing import Any

from celery.signals import worker_ready, worker_shutdown

from tandem.tasks.runtime import get_runtime
from tandem.tasks.state import results
from tandem.tasks.state.sweeping import Sweeping
from tandem.tasks.tenants.gate import TenantGate, gate_of

SWEEP_SECONDS = 5.0


class TenantSweeper(Sweeping):
    """Runs ``gate.sweep`` every ``SWEEP_SECONDS``."""

    interval = SWEEP_SECONDS
    thread_name = "tandem-tenants"

    def __init__(self, gate: TenantGate) -> None:
        super().__init__()
        self.gate = gate

    def sweep(self) -> int:
        return self.gate.sweep(self.interval)


_sweeper: TenantSweeper | None = None


def _ended(job_id: str, owner: str) -> None:
    """A job's end (``tandem.tasks.state.results.end_job``): its slot goes to the next jobs."""
    gate = gate_of(get_runtime())
    if gate is not None:
        gate.ended(job_id, owner)


results.END_HOOKS.append(_ended)


@worker_ready.connect
def _start(**_: Any) -> None:
    global _sweeper
    gate = gate_of(get_runtime())
    if gate is not None and gate.tenants.admission and _sweeper is None:
        _sweeper = TenantSweeper(gate)
        _sweeper.start()


@worker_shutdown.connect
def _stop(**_: Any) -> None:
    if _sweeper is not None:
        _sweeper.stop()
