"""The approval calls of a ``JobHandle``: reading a job's pause and deciding on it.

``JobHandle`` takes these methods from ``HandleApprovals``; they need the handle's ``id``, its
store and its Celery app. Every decision names its pause (the one given, or the one current when
read) and carries an idempotency key, so its outcome is always definite: the decisions, or a
typed refusal (``StalePauseError``, ``DecisionTimeout``, ``DecisionRefused``); see
``tandem.tasks.control.approvals`` and docs/approvals.md.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from functools import partial
from typing import Any

from celery import Celery

from tandem.client.sending import ask_or_withdraw, with_owner
from tandem.reasoner.approval import Decision
from tandem.tasks.control.approvals import ApprovalRecord, ApprovalStore, decisions_of
from tandem.tasks.errors import DecisionRefused
from tandem.tasks.state.store import JobStore

__all__ = ["HandleApprovals"]


class HandleApprovals:
    """``pending_approval``, ``decide``, ``approve``, ``reject`` and their ``a``-twins."""

    id: str
    _store: JobStore
    _app: Celery

    def pending_approval(self) -> ApprovalRecord | None:
        """The job's last pause: its ``pause_id``, the calls waiting for a decision and the
        decisions so far (``None``: none asked; ``decided``: that pause has ended)."""
        return ApprovalStore(self._store).get(self.id)

    def decide(
        self,
        decisions: Any,
        *,
        pause_id: str | None = None,
        idempotency_key: str | None = None,
        timeout: float = 30.0,
    ) -> list[Decision]:
        """Decide on calls awaiting approval through the ``tandem.decide`` task (a worker applies
        it); all the decisions stored so far for the pause.

        ``decisions``: ``[{"index": 1, "approve": True}, {"index": 2, "approve": False, "reason":
        "..."}, {"index": 3, "approve": True, "args": {...}}]`` (``Decision`` objects too), or
        ``True``/``False`` for every undecided call.

        ``pause_id`` names the pause answered (from ``approval_requested`` or
        ``pending_approval()``); without one, the pause current now is read and named, so a
        decision that reaches the worker after that pause ended is refused all the same.
        ``idempotency_key`` (a fresh one if not given): the same key sent again gets the first
        answer, and the decision applies once.

        Always a definite outcome: the decisions, or ``StalePauseError`` (the pause is not the
        current one), ``DecisionTimeout`` (no worker answered within ``timeout`` seconds, so the
        decision was withdrawn: it will never apply), or ``DecisionRefused`` with the reason.
        Nothing changed on a refusal."""
        return decisions_of(
            self.decision_answer(
                decisions, pause_id=pause_id, idempotency_key=idempotency_key, timeout=timeout
            )
        )

    def decision_answer(
        self,
        decisions: Any,
        *,
        pause_id: str | None = None,
        idempotency_key: str | None = None,
        timeout: float = 30.0,
        owner: str | None = None,
    ) -> dict[str, Any]:
        """``decide``'s definite outcome as ``tandem.decide``'s JSON answer, refusals included
        (``reason`` ``withdrawn`` when no worker answered in time); ``DecisionRefused`` only
        when no pause is given and the job waits on none (nothing is sent then)."""
        if isinstance(decisions, dict | Decision):
            decisions = [decisions]  # one decision
        wire = decisions if isinstance(decisions, bool) else [_wire(d) for d in decisions]
        key = idempotency_key or uuid.uuid4().hex
        machine = self._store.machine
        prior = machine.answered(self.id, key) if isinstance(key, str) and key else None
        if prior is not None:
            return dict(json.loads(prior))
        if pause_id is None and not _names_pause(wire):
            pause_id = self._current_pause()
        kwargs = {"job_id": self.id, "decisions": wire, "pause_id": pause_id, "idempotency_key": key}
        owner = owner if owner is not None else getattr(self, "owner", None)
        withdrawn = {
            "job_id": self.id,
            "accepted": False,
            "reason": "withdrawn",
            "error": (
                f"no worker applied the decision within {timeout:g} s (are workers running?), so "
                f"it was withdrawn: it will never apply, even if its message is still queued. "
                "Nothing was decided; decide again once workers run"
            ),
            "pause_id": pause_id,
            "current_pause": None,
        }
        return ask_or_withdraw(
            self._app,
            "tandem.decide",
            with_owner(kwargs, owner),
            timeout,
            partial(machine.remember, self.id, key),  # the first answer under the key wins
            withdrawn,
        )

    def _current_pause(self) -> str:
        """The id of the pause the job waits on now; ``DecisionRefused`` if it waits on none."""
        record = self.pending_approval()
        if record is None or record.decided:
            raise DecisionRefused(f"job {self.id!r} is not waiting for a decision; nothing was decided")
        return record.pause_id

    def approve(
        self,
        call: int | None = None,
        *,
        args: dict[str, Any] | None = None,
        pause_id: str | None = None,
        idempotency_key: str | None = None,
        timeout: float = 30.0,
    ) -> list[Decision]:
        """Approve call ``call`` (with edited ``args`` if given), or every undecided call, of pause
        ``pause_id`` (``None``: the current one, read now); see ``decide``."""
        decide = partial(self.decide, pause_id=pause_id, idempotency_key=idempotency_key, timeout=timeout)
        if call is None:
            if args is not None:
                raise DecisionRefused("edited args need the call they are for: approve(call=N, args=...)")
            return decide(True)
        decision: dict[str, Any] = {"index": call, "approve": True}
        if args is not None:
            decision["args"] = args
        return decide([decision])

    def reject(
        self,
        reason: str,
        call: int | None = None,
        *,
        pause_id: str | None = None,
        idempotency_key: str | None = None,
        timeout: float = 30.0,
    ) -> list[Decision]:
        """Reject call ``call``, or every undecided call, of pause ``pause_id`` (``None``: the
        current one, read now) with ``reason`` (the model reads it); see ``decide``."""
        decide = partial(self.decide, idempotency_key=idempotency_key, timeout=timeout)
        if call is not None:
            return decide([{"index": call, "approve": False, "reason": reason}], pause_id=pause_id)
        record = self.pending_approval()
        if record is None or record.decided:
            raise DecisionRefused(f"job {self.id!r} is not waiting for a decision; nothing was decided")
        undecided = [{"index": p.index, "approve": False, "reason": reason} for p in record.undecided()]
        return decide(undecided, pause_id=pause_id or record.pause_id)

    async def apending_approval(self) -> ApprovalRecord | None:
        """``pending_approval`` for asyncio."""
        return await asyncio.to_thread(self.pending_approval)

    async def adecide(
        self,
        decisions: Any,
        *,
        pause_id: str | None = None,
        idempotency_key: str | None = None,
        timeout: float = 30.0,
    ) -> list[Decision]:
        """``decide`` for asyncio: the ``tandem.decide`` task is sent and its reply awaited
        in a thread (same outcomes: decisions, ``StalePauseError``, ``DecisionTimeout``, ...)."""
        return await asyncio.to_thread(
            partial(self.decide, pause_id=pause_id, idempotency_key=idempotency_key, timeout=timeout),
            decisions,
        )

    async def aapprove(
        self,
        call: int | None = None,
        *,
        args: dict[str, Any] | None = None,
        pause_id: str | None = None,
        idempotency_key: str | None = None,
        timeout: float = 30.0,
    ) -> list[Decision]:
        """``approve`` for asyncio."""
        return await asyncio.to_thread(
            partial(
                self.approve,
                call,
                args=args,
                pause_id=pause_id,
                idempotency_key=idempotency_key,
                timeout=timeout,
            )
        )

    async def areject(
        self,
        reason: str,
        call: int | None = None,
        *,
        pause_id: str | None = None,
        idempotency_key: str | None = None,
        timeout: float = 30.0,
    ) -> list[Decision]:
        """``reject`` for asyncio."""
        return await asyncio.to_thread(
            partial(
                self.reject, reason, call, pause_id=pause_id, idempotency_key=idempotency_key, timeout=timeout
            )
        )


def _names_pause(wire: Any) -> bool:
    """Whether a batch in its JSON form names its pause in its decisions."""
    return isinstance(wire, list) and any(isinstance(d, dict) and "pause_id" in d for d in wire)


def _wire(decision: Any) -> Any:
    """A decision in its JSON form (``Decision`` objects are dumped; dicts pass as they are)."""
    if isinstance(decision, Decision):
        return decision.model_dump(mode="json", exclude_none=True)
    return decision
