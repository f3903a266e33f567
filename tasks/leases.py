"""Leases: a claimed step or tool call stays claimed while its worker lives.

A claim (``tandem.tasks.jobstate.JobMachine.claim`` / ``claim_call``) holds a lease that runs out
``lease_seconds`` after the last renewal, on Redis's clock. ``Heartbeat`` renews it every third
of that period from a daemon thread. A worker that dies, or is paused (SIGSTOP, a VM pause, a
Redis outage) past its lease, loses it: the reconciler counts a *lease expiry* and sends the step
again, and every later write of the old claim is refused (its epoch or token no longer matches),
so the paused worker stores nothing and sends nothing when it wakes up.
"""

from __future__ import annotations

import logging
import threading

from tandem.tasks.jobstate import Claim, JobMachine

log = logging.getLogger("tandem.leases")


class Heartbeat:
    """Renews one claim's lease until stopped. Use as a context manager."""

    def __init__(self, machine: JobMachine, claim: Claim, seconds: float) -> None:
        self.machine = machine
        self.claim = claim
        self.seconds = seconds
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _beat(self) -> None:
        interval = max(self.seconds / 3, 0.2)
        while not self._stop.wait(interval):
            try:
                if not self.machine.renew(self.claim, self.seconds):
                    log.warning(
                        "job %s lost its lease on %s of round %d (another worker may take it over)",
                        self.claim.job_id,
                        self.claim.kind if not self.claim.index else f"call {self.claim.index}",
                        self.claim.round,
                    )
                    self.lost.set()
                    return
            except Exception:  # a broken connection must not kill the step; the next beat retries
                log.warning("lease renewal for job %s failed; retrying", self.claim.job_id, exc_info=True)

    def __enter__(self) -> Heartbeat:
        self._thread = threading.Thread(
            target=self._beat, name=f"tandem-lease-{self.claim.job_id}", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
