"""The question calls of a ``JobHandle``: reading the question a job waits on and answering it.

``JobHandle`` takes these methods from ``HandleQuestions``; they need the handle's ``id``, its
store and its Celery app. Every answer names its pause (the one given, or the one current when
read) and carries an idempotency key, so its outcome is always definite: the answer, or a typed
refusal (``StalePauseError``, ``InvalidAnswer``, ``DecisionTimeout``, ``DecisionRefused``); see
``tandem.tasks.control.questions`` and docs/questions.md.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from functools import partial
from typing import Any

from celery import Celery

from tandem.client.sending import ask_or_withdraw, with_owner
from tandem.tasks.control.questions import QuestionRecord, QuestionStore, answer_of
from tandem.tasks.errors import DecisionRefused
from tandem.tasks.state.store import JobStore

__all__ = ["HandleQuestions"]


class HandleQuestions:
    """``pending_question``, ``answer``, ``answer_reply`` and ``aanswer``."""

    id: str
    _store: JobStore
    _app: Celery

    def pending_question(self) -> QuestionRecord | None:
        """The job's last question: its ``pause_id``, ``text``, ``answer_schema``, and its answer
        once given (``None``: it asked none; ``answered``: that pause has ended)."""
        return QuestionStore(self._store).get(self.id)

    def answer(
        self,
        answer: Any,
        *,
        pause_id: str | None = None,
        idempotency_key: str | None = None,
        timeout: float = 30.0,
    ) -> Any:
        """Answer the question the job waits on through the ``tandem.answer`` task (a worker
        stores it and the job goes on); the answer as stored.

        ``answer`` is any JSON value that fits the question's ``answer_schema`` (text for a
        question without one). ``pause_id`` names the pause answered (from ``question_asked`` or
        ``pending_question()``); without one, the pause current now is read and named, so an
        answer that reaches the worker after that pause ended is refused all the same.
        ``idempotency_key`` (a fresh one if not given): the same key sent again gets the first
        reply, and the answer applies once.

        Always a definite outcome: the answer, or ``StalePauseError`` (the pause is not the
        current one), ``InvalidAnswer`` (it does not fit the schema: the message names the
        field), ``DecisionTimeout`` (no worker answered within ``timeout`` seconds, so the answer
        was withdrawn: it will never apply), or ``DecisionRefused``. Nothing changed on a refusal."""
        return answer_of(
            self.answer_reply(answer, pause_id=pause_id, idempotency_key=idempotency_key, timeout=timeout)
        )

    def answer_reply(
        self,
        answer: Any,
        *,
        pause_id: str | None = None,
        idempotency_key: str | None = None,
        timeout: float = 30.0,
        owner: str | None = None,
    ) -> dict[str, Any]:
        """``answer``'s definite outcome as ``tandem.answer``'s JSON reply, refusals included
        (``reason`` ``withdrawn`` when no worker answered in time); ``DecisionRefused`` only when
        no pause is given and the job waits on no question (nothing is sent then)."""
        key = idempotency_key or uuid.uuid4().hex
        machine = self._store.machine
        prior = machine.answered(self.id, key) if isinstance(key, str) and key else None
        if prior is not None:
            return dict(json.loads(prior))
        if pause_id is None:
            record = self.pending_question()
            if record is None or record.answered:
                raise DecisionRefused(f"job {self.id!r} is not waiting for an answer; nothing was answered")
            pause_id = record.pause_id
        kwargs: dict[str, Any] = {
            "job_id": self.id,
            "answer": answer,
            "pause_id": pause_id,
            "idempotency_key": key,
        }
        owner = owner if owner is not None else getattr(self, "owner", None)
        withdrawn = {
            "job_id": self.id,
            "accepted": False,
            "reason": "withdrawn",
            "error": (
                f"no worker stored the answer within {timeout:g} s (are workers running?), so it "
                "was withdrawn: it will never apply, even if its message is still queued. Nothing "
                "was answered; answer again once workers run"
            ),
            "pause_id": pause_id,
            "current_pause": None,
        }
        return ask_or_withdraw(
            self._app,
            "tandem.answer",
            with_owner(kwargs, owner),
            timeout,
            partial(machine.remember, self.id, key),  # the first reply under the key wins
            withdrawn,
        )

    async def apending_question(self) -> QuestionRecord | None:
        """``pending_question`` for asyncio."""
        return await asyncio.to_thread(self.pending_question)

    async def aanswer(
        self,
        answer: Any,
        *,
        pause_id: str | None = None,
        idempotency_key: str | None = None,
        timeout: float = 30.0,
    ) -> Any:
        """``answer`` for asyncio: the ``tandem.answer`` task is sent and its reply awaited in a
        thread (same outcomes: the answer, ``StalePauseError``, ``InvalidAnswer``, ...)."""
        return await asyncio.to_thread(
            partial(self.answer, pause_id=pause_id, idempotency_key=idempotency_key, timeout=timeout), answer
        )
