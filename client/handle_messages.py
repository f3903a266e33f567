"""The conversation calls of a ``JobHandle``: a person's message into the running job, and a
follow-up on an ended one (a new job in its thread).

``JobHandle`` takes these methods from ``HandleMessages``; they need the handle's ``id``, its
store and its Celery app. A message carries an idempotency key (a fresh one if not given), so
its outcome is always definite: the message's id, or ``MessageRefused`` with the reason (see
``tandem.tasks.control.messages`` and docs/conversation.md).
"""

from __future__ import annotations

import asyncio
import uuid
from functools import partial
from typing import Any

from celery import Celery

from tandem.client.sending import ask, ask_or_withdraw, with_owner
from tandem.tasks.errors import MessageRefused, ResumeRefused
from tandem.tasks.state.keys import messages_key
from tandem.tasks.state.scripts import lua
from tandem.tasks.state.store import JobStore

__all__ = ["HandleMessages"]


class HandleMessages:
    """``message``, ``message_answer``, ``follow_up`` and their ``a``-twins."""

    id: str
    _store: JobStore
    _app: Celery
    owner: str | None = None

    def _sibling(self, job_id: str) -> Any:
        """The handle of another job of this store and app, for the same tenant (``JobHandle``'s)."""
        raise NotImplementedError

    def message(self, text: str, *, idempotency_key: str | None = None, timeout: float = 30.0) -> str:
        """Send ``text`` into this running job as a message from the person (``tandem.message``):
        the job's leading model (the Thinker of a dual job, the Actor of a mono or ReAct job) reads
        it at the start of its next round, once, and it stays in the job's memory. Returns the
        message's id.

        ``idempotency_key`` (a fresh one if not given): the same key sent again gets the first
        answer and adds nothing. ``MessageRefused`` (``reason``: ``ended``, ``unknown``,
        ``invalid``, ``full``, or ``withdrawn`` when no worker took it within ``timeout``
        seconds: it will then never apply) says why nothing was added."""
        answer = self.message_answer(text, idempotency_key=idempotency_key, timeout=timeout)
        if not answer.get("accepted"):
            raise MessageRefused(str(answer.get("error")), str(answer.get("reason", "invalid")))
        return str(answer["message_id"])

    def message_answer(
        self,
        text: str,
        *,
        idempotency_key: str | None = None,
        timeout: float = 30.0,
        owner: str | None = None,
    ) -> dict[str, Any]:
        """``message``'s definite outcome as ``tandem.message``'s JSON answer, refusals included
        (``reason`` ``withdrawn`` when no worker answered in time)."""
        key = idempotency_key or uuid.uuid4().hex
        kwargs: dict[str, Any] = {"job_id": self.id, "text": text, "idempotency_key": key}
        owner = owner if owner is not None else getattr(self, "owner", None)
        withdrawn = {
            "job_id": self.id,
            "accepted": False,
            "reason": "withdrawn",
            "error": (
                f"no worker took the message within {timeout:g} s (are workers running?), so it "
                "was withdrawn: it will never reach the job, even if its task is still queued. "
                "Send it again once workers run"
            ),
        }
        return ask_or_withdraw(
            self._app,
            "tandem.message",
            with_owner(kwargs, owner),
            timeout,
            partial(self._withdraw, key),
            withdrawn,
        )

    def _withdraw(self, key: str, answer: str) -> str:
        """Keep ``answer`` under ``key`` unless a worker's answer is there first; the one kept."""
        store = self._store
        keys = [store.key(self.id, "state"), messages_key(store.prefix, self.id)]
        script = store.redis.register_script(lua("remember"))
        kept = script(keys=keys, args=[f"key:{key}", answer])
        return kept.decode() if isinstance(kept, bytes) else str(kept)

    async def amessage(self, text: str, *, idempotency_key: str | None = None, timeout: float = 30.0) -> str:
        """``message`` for asyncio: the task is sent and its answer awaited in a thread."""
        return await asyncio.to_thread(
            partial(self.message, idempotency_key=idempotency_key, timeout=timeout), text
        )

    def follow_up(
        self,
        goal: str,
        *,
        idempotency_key: str | None = None,
        timeout: float = 30.0,
        owner: str | None = None,
    ) -> Any:
        """Start a new job on this ended job's thread with ``goal`` (``tandem.follow_up``): the same
        spec (reasoner, tools, budgets, owner), and as its context the thread so far (each earlier
        job's goal, the person's messages and its answer, within ``TANDEM_MAX_THREAD_CHARS``). Its
        ``JobHandle``. ``idempotency_key``: the same key gives the same follow-up job.
        ``ResumeRefused`` says why not (``reason``: ``unknown``, ``state`` while the job runs,
        ``invalid``); nothing is started then."""
        kwargs: dict[str, Any] = {"job_id": self.id, "goal": goal}
        if idempotency_key is not None:
            kwargs["idempotency_key"] = idempotency_key
        owner = owner if owner is not None else self.owner
        reply = ask(self._app, "tandem.follow_up", with_owner(kwargs, owner), timeout, "the follow-up")
        if not reply.get("accepted"):
            error = reply.get("error") if isinstance(reply, dict) else repr(reply)
            reason = reply.get("reason", "invalid") if isinstance(reply, dict) else "invalid"
            raise ResumeRefused(str(error), str(reason))
        return self._sibling(str(reply["follow_up_id"]))

    async def afollow_up(
        self, goal: str, *, idempotency_key: str | None = None, timeout: float = 30.0
    ) -> Any:
        """``follow_up`` for asyncio: the task is sent and its answer awaited in a thread."""
        return await asyncio.to_thread(
            partial(self.follow_up, idempotency_key=idempotency_key, timeout=timeout), goal
        )
