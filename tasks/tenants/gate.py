"""``TenantGate``: tenant caps, fair share and quotas on a job's path (intake, end, sweep).

- Intake asks ``refusal`` (a daily quota used up: the job is refused with the reason), then
  ``admit``: admitted, the job is created and sent as usual; else it is queued in its tenant's
  waiting list, and created with its first step kept in the outbox and ``hold`` holds it (state
  ``waiting``, ``wait_for: tenant``: it holds no worker and no queued message). The wait does not
  count towards the job's deadline; it lasts at most ``TANDEM_MEMORY_TTL`` (then the job fails for
  its deadline). Picked by the fair pick, ``start`` un-holds it and sends its first step.
- ``tandem.resume`` and ``tandem.fork`` admit the job they reopened or created the same way (no
  quota check): admitted, its step is sent; else ``hold`` holds it at that step (with the epoch
  its reopen gave it).
- A job's end (``ended``, a hook of ``tandem.tasks.state.results.end_job``) releases its slot and
  starts the jobs the fair pick admits into the free slots.
- A worker's sweep (``sweep``, every few seconds) releases the slots of jobs that ended unseen (a
  client's cancel) or were never created (seen missing at two sweeps in a row: an intake killed
  between its admission and the record), starts admitted jobs no worker started, and admits into
  free slots.
"""

from __future__ import annotations

import logging
import time
import weakref
from typing import TYPE_CHECKING

from tandem.broker_config.tenant_settings import TenantSettings
from tandem.reasoner.messages import Usage
from tandem.tasks.job_events import Waiting
from tandem.tasks.state.keys import job_keys
from tandem.tasks.state.scripts import lua
from tandem.tasks.steps.dispatch import send_outbox
from tandem.tasks.tenants.queue import TenantQueue, is_spawned
from tandem.tasks.tenants.usage import TenantUsage

if TYPE_CHECKING:
    from tandem.tasks.runtime import Runtime
    from tandem.tasks.spec import JobSpec

log = logging.getLogger("tandem.tenants")

FINAL = ("completed", "truncated", "failed", "cancelled")
STARTS = ("admitted", "running")
"""The verdicts of ``TenantGate.admit`` on which intake starts the job at once."""
RESTART_AFTER = 10.0
"""Seconds after its admission an admitted job not known started is started again by a sweep."""


class TenantGate:
    """The tenants' admission and quotas for one runtime (see the module docstring)."""

    def __init__(self, rt: Runtime, tenants: TenantSettings) -> None:
        self.rt = rt
        self.tenants = tenants
        self.queue = TenantQueue(rt.redis, rt.settings.prefix, tenants)
        self.usage = TenantUsage(rt.redis, rt.settings.prefix)
        self._hold = rt.redis.register_script(lua("tenant_hold"))
        self._missing: set[str] = set()  # running jobs without a record at the last sweep
        self._start = rt.redis.register_script(lua("tenant_start"))

    # -- intake ---------------------------------------------------------------------------------

    def refusal(self, spec: JobSpec) -> str | None:
        """Why intake refuses ``spec`` (its tenant's daily quota is used up), or ``None``."""
        if not self.tenants.quotas:
            return None
        return self.usage.refusal(spec.owner, self.tenants.policy(spec.owner))

    def admit(self, job_id: str, spec: JobSpec) -> str:
        """Ask to start the job: in ``STARTS`` intake starts it now (its tenant and the fleet have
        room and none of the tenant's jobs waits ahead of it, or no cap is set); else it is queued
        for its turn and intake creates it held (``hold``, with this verdict)."""
        if not self.tenants.admission or self._spawned(job_id, spec):
            return "admitted"
        timeout = spec.timeout_s or self.rt.settings.job_timeout
        expiry = timeout + self.rt.settings.memory_ttl  # the longest it may count, waits included
        return self.queue.admit(job_id, spec.owner, spec.priority, expiry)

    def _spawned(self, job_id: str, spec: JobSpec) -> bool:
        """Whether the job is a child its parent started (a worker marked it, ``mark_spawned``: not
        a spec that merely names a parent, nor an id a client wrote in a children index): it runs
        in its parent's slot, uncounted. A parent waiting for its children holds its slot, so a
        child counted against the same cap could wait for it forever (docs/tenants.md)."""
        if spec.parent_id is None:
            return False
        if not is_spawned(self.rt.redis, self.rt.settings.prefix, job_id):  # a worker-only key
            return False
        parent = self.rt.store.spec(spec.parent_id)  # a child has its parent's owner
        return parent is not None and parent.owner == spec.owner

    def hold(
        self, job_id: str, spec: JobSpec, created: bool, verdict: str, *, epoch: int = 0, step: str = "intake"
    ) -> None:
        """Hold the first step of a job ``admit`` queued, which intake just created (``created``;
        else a copy of its message, held already): state ``waiting`` for ``tenant``, no message.
        A resumed or forked job is held at the step it reopened at: ``epoch`` is the one its reopen
        gave it (``Reopened.epoch``: no claim since), ``step`` names who holds it in its event."""
        if not created:
            return
        policy = self.tenants.policy(spec.owner)
        max_wait = float(self.rt.settings.memory_ttl)
        cap, fleet = policy.max_running_jobs, self.tenants.max_running_jobs
        detail = f"waits to start: tenant {spec.owner!r} runs at most {cap or 'any number of'} jobs at once"
        detail += f", the fleet {fleet} (TANDEM_MAX_RUNNING_JOBS)" if fleet else ""
        detail += "; free slots go to the tenants with waiting jobs by weight"
        if self._hold(
            keys=job_keys(self.rt.settings.prefix, job_id), args=[f"{max_wait:.3f}", detail, str(epoch)]
        ):
            now = time.time()
            timeout = spec.timeout_s or self.rt.settings.job_timeout
            ttl = int(timeout + max_wait + self.rt.settings.memory_ttl)
            self.rt.machine.index(job_id, now + timeout + max_wait, ttl)  # the reconciler: its deadline
            self._keep_cancel(job_id)
            waiting = Waiting(reason="tenant", step=step, until=now + max_wait, detail=detail)
            self.rt.store.publish(job_id, waiting)
        if not self.queue.is_waiting(job_id, spec.owner):  # picked while it was being held
            self.start(job_id)
        elif verdict == "waiting+room":  # queued behind its own tenant's jobs while a slot was free
            for admitted in self.queue.pick():
                self.start(admitted)

    def _keep_cancel(self, job_id: str) -> None:
        """A cancel that came once the record said ``waiting`` and before the index moved the
        job's next look to its deadline lost its look-now to that move: bring it back and wake a
        reconciler, so the held job still ends at once (``JobStore.request_cancel``)."""
        if self.rt.store.cancel_requested(job_id):
            pipe = self.rt.redis.pipeline(transaction=False)
            self.rt.machine.look_now(job_id, pipe)
            pipe.execute()
            self.rt.machine.wake()

    def start(self, job_id: str) -> None:
        """Start an admitted job: its record runs again and its first step is sent."""
        rt = self.rt
        started = self._start(keys=job_keys(rt.settings.prefix, job_id), args=[])
        if started:
            first_look = min(rt.settings.lease_seconds, rt.settings.stall_seconds)
            ttl = int(rt.settings.job_timeout + rt.settings.memory_ttl)
            rt.machine.index(job_id, time.time() + first_look, ttl)
        if send_outbox(rt, job_id):
            self.queue.started(job_id)

    # -- a job's end, a sweep ---------------------------------------------------------------------

    def ended(self, job_id: str, owner: str) -> None:
        """Release ``job_id``'s slot (or its place in the waiting list) and start the jobs admitted."""
        if not self.tenants.admission:
            return
        for admitted in self.queue.pick((job_id, owner)):
            self.start(admitted)

    def sweep(self, every: float = 5.0) -> int:
        """Release the slots of jobs that ended unseen, start admitted jobs left unstarted, admit
        into free slots; how many jobs it started. One worker of the fleet sweeps in each period of
        ``every`` seconds (the first to take the period's lock): the sweep reads every running
        job's state, so a sweep per worker would cost the fleet that read once per worker."""
        if not self.tenants.admission:
            return 0
        redis, prefix = self.rt.redis, self.rt.settings.prefix
        if not redis.set(self.queue.key("sweep"), "1", nx=True, px=max(int(every * 1000) - 50, 1)):
            return 0  # another worker sweeps in this period
        missing: set[str] = set()
        for tenant in self.queue.known_tenants():
            running = self.queue.running_jobs(tenant)
            pipe = redis.pipeline(transaction=False)
            for job_id in running:
                pipe.hget(job_keys(prefix, job_id)[0], "state")
            for job_id, raw in zip(running, pipe.execute() if running else [], strict=True):
                state = raw.decode() if isinstance(raw, bytes) else raw
                if state is None:  # admitted, not created yet, or never: released at the second look
                    missing.add(job_id)
                if state in FINAL or (state is None and job_id in self._missing):
                    self.queue.pick((job_id, tenant), most=0)
        self._missing = missing
        stale = self.queue.admitted_before(time.time() - RESTART_AFTER)
        for job_id in stale:
            self.start(job_id)
        fresh = self.queue.pick()
        for job_id in fresh:
            self.start(job_id)
        return len(stale) + len(fresh)

    # -- usage -----------------------------------------------------------------------------------

    def count(self, owner: str, usage: Usage) -> None:
        """Count a model reply's usage towards ``owner``'s day (never raises: it must not fail a step)."""
        if not self.tenants.quotas:
            return
        try:
            self.usage.add(owner, usage.total_tokens, usage.cost_usd)
        except Exception:
            log.warning("could not count the usage of tenant %r", owner, exc_info=True)


_GATES: weakref.WeakKeyDictionary[Runtime, TenantGate | None] = weakref.WeakKeyDictionary()


def gate_of(rt: Runtime) -> TenantGate | None:
    """The runtime's tenant gate (built on first use from ``TANDEM_TENANTS`` and
    ``TANDEM_MAX_RUNNING_JOBS``), or ``None`` when neither is set."""
    if rt in _GATES:
        return _GATES[rt]
    tenants = TenantSettings.from_env()
    gate = TenantGate(rt, tenants) if tenants.enabled else None
    _GATES[rt] = gate
    return gate


__all__ = ["STARTS", "TenantGate", "gate_of"]
