"""Leases: a claimed step or tool call stays claimed while its worker lives.

A claim (``tandem.tasks.state.machine.JobMachine.claim`` / ``claim_call``) holds a lease that runs out
``lease_seconds`` after the last renewal, on Redis's clock. ``Heartbeat`` renews it every third
of that period. A worker that dies, or is paused (SIGSTOP, a VM pause, a Redis outage) past its
lease, loses it: the reconciler counts a *lease expiry* and sends the step again, and every later
write of the old claim is refused (its epoch or token no longer matches), so the paused worker
stores nothing and sends nothing when it wakes up.

The renewals of every claim a process holds are made by one daemon thread (``LeaseKeeper``), so
a step costs no thread of its own, and a step shorter than a third of its lease costs no renewal
at all. A renewal also carries what a step's call met so far (``Heartbeat.note``: the error of a
model attempt that is retried), so that a job ended by its deadline meanwhile reports it.
"""

from __future__ import annotations

import logging
import threading
import time

from tandem.tasks.state.claims import Claim
from tandem.tasks.state.machine import JobMachine

log = logging.getLogger("tandem.leases")


class LeaseKeeper:
    """One daemon thread that renews the leases of the claims held in this process.

    Each claim is renewed once a third of its lease has passed since it was taken or last
    renewed; a claim whose renewal is refused (the claim was lost) is marked ``lost`` and dropped.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[int, tuple[Heartbeat, float]] = {}  # id -> (heartbeat, next renewal)
        self._wake = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None

    def hold(self, beat: Heartbeat) -> None:
        """Renew ``beat``'s claim until ``drop``."""
        with self._lock:
            self._held[id(beat)] = (beat, time.monotonic() + beat.interval)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="tandem-lease-keeper", daemon=True)
                self._thread.start()
            self._wake.notify()

    def drop(self, beat: Heartbeat) -> None:
        """Stop renewing ``beat``'s claim."""
        with self._lock:
            self._held.pop(id(beat), None)

    def note(self, beat: Heartbeat, error: str) -> None:
        """Renew ``beat``'s claim now, writing ``error`` as the job's last error."""
        with self._lock:
            if id(beat) not in self._held:
                return
            beat.error = error
            self._held[id(beat)] = (beat, time.monotonic())
            self._wake.notify()

    def _due(self) -> list[tuple[Heartbeat, str]]:
        """Wait until a renewal is due; the heartbeats due (their next renewal is set), each with
        the error it has to write (``""``: none)."""
        with self._lock:
            while True:
                now = time.monotonic()
                due = [beat for beat, at in self._held.values() if at <= now]
                if due:
                    taken = []
                    for beat in due:
                        self._held[id(beat)] = (beat, now + beat.interval)
                        taken.append((beat, beat.error))
                        beat.error = ""
                    return taken
                nearest = min((at for _, at in self._held.values()), default=now + 1.0)
                self._wake.wait(max(nearest - now, 0.01))

    def _run(self) -> None:
        while True:
            for beat, error in self._due():
                try:
                    if not beat.machine.renew(beat.claim, beat.seconds, error):
                        with self._lock:  # a step that committed meanwhile dropped its claim itself
                            held = id(beat) in self._held
                        if not held:
                            continue
                        log.warning(
                            "job %s lost its lease on %s of round %d (another worker may take it over)",
                            beat.claim.job_id,
                            beat.claim.kind if not beat.claim.index else f"call {beat.claim.index}",
                            beat.claim.round,
                        )
                        beat.lost.set()
                        self.drop(beat)
                except Exception:  # a broken connection must not kill the step; the next beat retries
                    log.warning("lease renewal for job %s failed; retrying", beat.claim.job_id, exc_info=True)


_keeper = LeaseKeeper()


class Heartbeat:
    """Renews one claim's lease (through the process's ``LeaseKeeper``) until stopped. Use as a
    context manager; ``lost`` is set once a renewal is refused."""

    def __init__(
        self, machine: JobMachine, claim: Claim, seconds: float, keeper: LeaseKeeper | None = None
    ) -> None:
        self.machine = machine
        self.claim = claim
        self.seconds = seconds
        self.interval = max(seconds / 3, 0.2)
        self.lost = threading.Event()
        self.error = ""
        """An error to write as the job's last error with the next renewal (``note``)."""
        self._keeper = keeper or _keeper
        self._holding = False

    def note(self, error: str) -> None:
        """Write ``error`` as the job's last error now, with a renewal, in the calling thread, so a
        job whose deadline passes before the step ends still says what went wrong (a model call's
        failed attempts are noted as they happen: ``tandem.reasoner.models.attempt_notes``). Left
        to the keeper's thread, the write could come after the reconciler had ended the job for its
        deadline with "last error: none" (seen on a loaded machine). A failed write is the keeper's
        to do again."""
        if self.lost.is_set() or not self._holding:  # a lost claim, or a step that ended: nothing
            return
        try:
            kept = self.machine.renew(self.claim, self.seconds, error)
        except Exception:  # Redis away: the keeper writes it with its next renewal
            self._keeper.note(self, error)
            return
        if not kept:  # the claim was lost: the keeper's next renewal says so and drops it
            self._keeper.note(self, "")

    def __enter__(self) -> Heartbeat:
        self._holding = True
        self._keeper.hold(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self._holding = False
        self._keeper.drop(self)
