"""A person's answer to a question a tool call asked, on workers: parking, answering, timing out.

A tool asks through ``ToolCallContext.ask(question, schema)`` (the built-in ``ask_person`` tool
too). On a worker the call's context answers through a ``WorkerAsker``: an answer stored for
this question is returned at once; otherwise the asker raises ``QuestionPending``, which unwinds
the tool (a ``BaseException``, so a tool's ``except Exception`` does not swallow it) up to
``run_tool``, which parks the job (``park``, script ``ask.lua``): state ``awaiting_approval``
with ``pause_kind`` ``question``, the call held (never claimed or sent again), a new pause
(``pause_seq``), and the deadline pushed back by the longest wait. The job then holds no worker
and has no task queued. Readers that know ``awaiting_approval`` (metrics, the console badge)
count it as waiting for a person, which it is.

An answer (``tandem.answer``, ``JobHandle.answer``, ``POST /v1/jobs/{id}/answers``) is checked
against the question's JSON schema and stored by ``answer.lua``, which refuses it unless the job
still waits on the pause it names; the same script stores the answer in the round's ``calls``
hash, puts the asking call back in the outbox and sets the job running. The call then **runs
again from the start** and its ``ask`` returns the answer; its result (for ``ask_person``, the
answer itself) goes to memory like any call's, so resume and fork replay it.

No answer within ``JobSpec.answer_timeout_s`` (``TANDEM_MEMORY_TTL`` without one) stores a
timeout instead (``expire_if_due``, run by the reconciler, or the first answer that comes too
late): the call runs again and its ``ask`` raises ``NoAnswer`` ("no answer within N s"), which
the tool may catch; ``ask_person`` returns it to the model as a FAILED result.

One pause at a time: a call that asks while the job already waits on another pause is released
without a result and asks again when it is sent again: by the answer to the open question (which
sends it with the answered call), or by the reconciler once an approval pause has ended.

Keys: ``{prefix}:{<job_id>}:question`` (a hash: ``record``, the last question's JSON, and ``seq``,
its pause number; the job's TTL) and the
job's ``decisions`` hash (answers by idempotency key, shared with decisions).
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, computed_field

from tandem.reasoner.loop.step import Step
from tandem.reasoner.questions import check_answer
from tandem.tasks.control.once import Repeated, refusal, reply_once
from tandem.tasks.errors import DecisionRefused, DecisionTimeout, InvalidAnswer, StalePauseError
from tandem.tasks.job_events import QuestionAnswered, QuestionAsked
from tandem.tasks.state.keys import pause_id
from tandem.tasks.state.scripts import lua
from tandem.tasks.steps.messages import step_messages
from tandem.toolkit.context import Question
from tandem.toolkit.errors import NoAnswer, QuestionError

if TYPE_CHECKING:
    from tandem.tasks.state.claims import Claim
    from tandem.tasks.state.store import JobStore

__all__ = ["QuestionPending", "QuestionRecord", "QuestionStore", "WorkerAsker", "answer_of"]

"""The longest idempotency key (characters)."""

AnsweredBy = Literal["person", "timeout"]


class QuestionRecord(BaseModel):
    """The question a job's tool call waits on, and its answer once given."""

    job_id: str
    round: int
    call_index: int
    tool: str = ""
    text: str
    answer_schema: dict[str, Any] | None = None
    ask_seq: int = 1
    """Which question of its call this is (a call may ask several, one after the other)."""
    asked_at: float
    timeout_s: float
    seq: int = 0
    """The pause's number in the job (its ``pause_seq``, counted by the parking script)."""
    answer: Any = None
    answered_by: AnsweredBy | None = None
    answered_at: float | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def pause_id(self) -> str:
        """The id an answer names: ``<job>:<round>:tools:<seq>``, like an approval's."""
        return pause_id(self.job_id, self.round, self.seq)

    @property
    def deadline(self) -> float:
        """When no answer fails the question (epoch seconds)."""
        return self.asked_at + self.timeout_s

    @property
    def answered(self) -> bool:
        """Whether the pause has ended (answered by a person, or by the timeout)."""
        return self.answered_by is not None

    def public(self) -> dict[str, Any]:
        """What a person is shown: the question, its schema, who asks, until when."""
        return {
            "pause_id": self.pause_id,
            "round": self.round,
            "call_index": self.call_index,
            "tool": self.tool,
            "text": self.text,
            "answer_schema": self.answer_schema,
            "timeout_s": self.timeout_s,
            "until": self.deadline,
            "answered_by": self.answered_by,
        }


class QuestionPending(BaseException):
    """Raised by ``WorkerAsker`` when the question has no answer yet: it unwinds the tool so that
    ``run_tool`` parks the job (a ``BaseException``: a tool's ``except Exception`` lets it pass)."""

    def __init__(self, question: Question, tool: str) -> None:
        super().__init__(question.text)
        self.question = question
        self.tool = tool


def answer_field(index: int, ask_seq: int) -> str:
    """The field of the round's ``calls`` hash holding the answer to question ``ask_seq`` of call
    ``index``."""
    return f"{index}:answer:{ask_seq}"


class WorkerAsker:
    """``ToolCallContext.ask`` on a worker: the stored answer, or ``QuestionPending``."""

    def __init__(self, store: JobStore, job_id: str, round_no: int, index: int, tool: str) -> None:
        self.store = store
        self.job_id = job_id
        self.round = round_no
        self.index = index
        self.tool = tool

    def __call__(self, question: Question) -> Any:
        raw = self.store.redis.hget(
            self.store.key(self.job_id, "calls"), answer_field(self.index, question.seq)
        )
        if raw is None:
            raise QuestionPending(question, self.tool)
        stored = json.loads(raw)
        if stored.get("by") == "timeout":
            raise NoAnswer(float(stored.get("timeout_s") or 0))
        return stored.get("answer")


class QuestionStore:
    """Reads, parks, answers and times out the questions of one ``JobStore``'s jobs.

    The pause's shape is class data, so that a job's wait for its child jobs
    (``tandem.tasks.control.children.ChildrenStore``) parks and resumes through the same scripts:
    the state and ``pause_kind`` it parks in, its record's key and model, the ``calls`` field
    its answer goes to, and whether the wait moves the deadline back."""

    state = "awaiting_approval"
    kind = "question"
    part = "question"
    field_kind = "answer"
    record_type: type[QuestionRecord] = QuestionRecord
    moves_deadline = True

    def __init__(self, store: JobStore) -> None:
        self.store = store
        self.redis = store.redis
        self._ask = self.redis.register_script(lua("ask"))
        self._answer = self.redis.register_script(lua("answer"))

    def key(self, job_id: str) -> str:
        """The Redis key of a job's question record."""
        return self.store.key(job_id, self.part)

    def get(self, job_id: str) -> QuestionRecord | None:
        """The job's last question (answered or not), if it asked one."""
        found = self._read(job_id)
        return None if found is None else found[1]

    def _read(self, job_id: str) -> tuple[str, QuestionRecord] | None:
        """The stored record (JSON, as the scripts compare it) and the record with its pause number."""
        raw, seq = self.redis.hmget(self.key(job_id), ["record", "seq"])
        if raw is None:
            return None
        record = self.record_type.model_validate_json(raw).model_copy(update={"seq": int(_text(seq or 0))})
        return _text(raw), record

    def park(self, claim: Claim, asked: QuestionPending, timeout_s: float) -> str:
        """Park the job on ``asked``, the question of ``claim``'s call; ``parked``, ``busy``
        (another pause is open: the call was released and asks again later), or why not
        (``lost``, ``ended``, ``gone``). Publishes ``question_asked`` once parked."""
        record = self.record_of(claim, asked, timeout_s)
        reply = self._ask(
            keys=[*self.store.keys(claim.job_id), self.key(claim.job_id)],
            args=[
                claim.round,
                claim.index,
                claim.token,
                record.model_dump_json(exclude={"pause_id", "seq"}),
                f"{timeout_s if self.moves_deadline else 0:.3f}",
                f"{record.deadline:.6f}",
                self.state,
                self.kind,
            ],
        )
        verdict = _text(reply[0])
        if verdict == "parked":
            record = record.model_copy(update={"seq": int(_text(reply[1]))})
            self.parked(claim.job_id, record)
        return verdict

    def record_of(self, claim: Claim, asked: QuestionPending, timeout_s: float) -> QuestionRecord:
        """The record of the pause ``asked`` opens for ``claim``'s call."""
        return QuestionRecord(
            job_id=claim.job_id,
            round=claim.round,
            call_index=claim.index,
            tool=asked.tool,
            text=asked.question.text,
            answer_schema=asked.question.answer_schema,
            ask_seq=asked.question.seq,
            asked_at=time.time(),
            timeout_s=timeout_s,
        )

    def parked(self, job_id: str, record: QuestionRecord) -> None:
        """Publish that the job parked on ``record`` (``question_asked``)."""
        event = QuestionAsked(
            round=record.round,
            pause_id=record.pause_id,
            seq=record.seq,
            call_index=record.call_index,
            tool=record.tool,
            question=record.text,
            answer_schema=record.answer_schema,
            timeout_s=record.timeout_s,
            until=record.deadline,
        )
        self.store.publish(job_id, event)

    def answer(
        self,
        job_id: str,
        answer: Any,
        *,
        pause: Any = None,
        key: Any = None,
        now: float | None = None,
    ) -> dict[str, Any]:
        """The JSON reply to an answer (what ``tandem.answer`` returns): ``{"job_id", "accepted":
        true, "pause_id", "round", "call_index", "answer"}`` or ``{"job_id", "accepted": false,
        "error", "reason", "pause_id", "current_pause"}`` (``reason``: ``stale_pause``,
        ``invalid_answer``, ``refused`` or ``withdrawn``). A refused answer changes nothing. With
        an idempotency ``key`` the first reply is kept and given again, and the answer applies once."""
        if pause is not None and (not isinstance(pause, str) or not pause):
            return refusal(
                job_id,
                DecisionRefused(
                    f"pause_id must be a pause's id string (from question_asked or the job's status), "
                    f"got {pause!r}; nothing was answered"
                ),
                None,
            )
        return reply_once(
            self.store.machine,
            job_id,
            key,
            pause,
            "answered",
            lambda stored_key: self._store(job_id, answer, pause, stored_key, now),
            _accepted,
        )

    def expire_if_due(self, job_id: str, *, now: float | None = None) -> QuestionRecord | None:
        """Store the timeout of a question unanswered past its deadline (the call runs again and
        its ``ask`` raises ``NoAnswer``); the record then. Safe to call from any process, often."""
        record = self.get(job_id)
        at = time.time() if now is None else now
        if record is None or record.answered or at < record.deadline:
            return record
        # Refused when stored here or by another process first, or the job moved on.
        with contextlib.suppress(DecisionRefused, Repeated):
            self._store(job_id, None, record.pause_id, "", at)
        return self.get(job_id)

    def _store(
        self, job_id: str, answer: Any, pause: str | None, key: str, now: float | None
    ) -> QuestionRecord:
        """Store ``answer`` for pause ``pause`` (``None``: the current one), or the timeout's
        non-answer once the question is due; the updated record. ``DecisionRefused`` (or
        ``StalePauseError``, ``InvalidAnswer``) when it does not apply."""
        for _ in range(100):  # another answer between the read and the write: read again
            found = self._read(job_id)
            state = self.store.machine.record(job_id)
            if found is None:
                if not state:
                    raise DecisionRefused(f"job {job_id!r} is not known (never submitted, or expired)")
                if pause is not None:
                    raise _stale(f"job {job_id!r} asked no question", pause, None)
                raise DecisionRefused(f"job {job_id!r} is not waiting for an answer; nothing was answered")
            read, record = found
            wanted = pause if pause is not None else record.pause_id
            _check_current(job_id, record, wanted, state, self.state, self.kind)
            at = time.time() if now is None else now
            late = at >= record.deadline
            if late:
                stored: dict[str, Any] = {"by": "timeout", "timeout_s": record.timeout_s}
                update: dict[str, Any] = {"answered_by": "timeout", "answered_at": at}
            else:
                try:
                    check_answer(answer, record.answer_schema)
                except QuestionError as exc:
                    raise InvalidAnswer(f"job {job_id!r}: {exc}; nothing was answered") from None
                stored = {"by": "person", "answer": answer}
                update = {"answer": answer, "answered_by": "person", "answered_at": at}
            updated = record.model_copy(update=update)
            reply_json = json.dumps(
                refusal(job_id, _late(job_id, record), wanted) if late else _accepted(job_id, updated)
            )
            outbox = step_messages(job_id, Step(record.round, "tools"), [record.call_index])
            calls = range(1, int(state.get("calls") or 0) + 1)
            by_index = {
                str(m["args"][2]): m for m in step_messages(job_id, Step(record.round, "tools"), calls)
            }
            reply = [
                _text(x)
                for x in self._answer(
                    keys=[
                        *self.store.keys(job_id),
                        self.key(job_id),
                        self.store.machine.decisions_key(job_id),
                    ],
                    args=[
                        str(record.seq),
                        key,
                        reply_json if key else "",
                        read,
                        updated.model_dump_json(exclude={"pause_id", "seq"}),
                        f"{record.call_index}:{self.field_kind}:{record.ask_seq}",
                        json.dumps(stored),
                        json.dumps(outbox),
                        uuid.uuid4().hex,
                        record.round,
                        record.call_index,
                        json.dumps(by_index),
                        self.state,
                        self.kind,
                    ],
                )
            ]
            if reply[0] != "changed":
                break
        else:  # pragma: no cover - a hundred answers racing on one job
            raise DecisionRefused(f"job {job_id!r}: too many answers at once; try again")
        if reply[0] == "repeat":
            raise Repeated(dict(json.loads(reply[1])))
        if reply[0] == "stale":
            current = pause_id(job_id, int(state.get("round") or 0), int(reply[1]))
            waiting = reply[2] == self.state
            raise _stale(
                f"job {job_id!r} paused again since it was read", wanted, current if waiting else None
            )
        if reply[0] == "not-waiting":
            raise _stale(f"that question of job {job_id!r} has been answered already", wanted, None)
        if reply[0] == "gone":
            raise DecisionRefused(
                f"job {job_id!r} is not known any more (its records expired); nothing was answered"
            )
        if reply[0] == "ended":
            raise DecisionRefused(f"job {job_id!r} has ended ({reply[1]}); nothing was answered")
        self.answered(job_id, updated, late)
        if late:
            raise _late(job_id, record)
        return updated

    def answered(self, job_id: str, updated: QuestionRecord, late: bool) -> None:
        """Publish that the pause of ``updated`` ended (``question_answered``)."""
        self.store.publish(
            job_id,
            QuestionAnswered(
                round=updated.round,
                pause_id=updated.pause_id,
                by="timeout" if late else "person",
                call_index=updated.call_index,
                answer=None if late else updated.answer,
            ),
        )


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _check_current(
    job_id: str,
    record: QuestionRecord,
    wanted: str,
    state: dict[str, str],
    parked: str = "awaiting_approval",
    kind: str = "question",
) -> None:
    """``StalePauseError`` unless ``wanted`` is ``record``'s pause and the job still waits on it
    (in state ``parked``, pause kind ``kind``)."""
    waiting = state.get("state") == parked and state.get("pause_kind") == kind
    current_seq = int(state.get("pause_seq") or 0)
    live = waiting and not record.answered and record.seq == current_seq
    current = record.pause_id if live else None
    if state.get("state") == parked and not live:
        current = pause_id(job_id, int(state.get("round") or 0), current_seq)
    if wanted != record.pause_id:
        now = f"it waits on pause {current!r}" if current else "it waits on no pause now"
        raise _stale(f"job {job_id!r}: that pause is not the current one ({now})", wanted, current)
    if not live:
        why = (
            f"that question of job {job_id!r} was answered already (by {record.answered_by})"
            if record.answered
            else f"job {job_id!r} does not wait on that question now"
        )
        raise _stale(why, wanted, current)


def _stale(why: str, wanted: str | None, current: str | None) -> StalePauseError:
    return StalePauseError(
        f"{why}; this answer for pause {wanted!r} changes nothing"
        + (f" (the job waits on {current!r} now)" if current else ""),
        pause_id=wanted,
        current_pause=current,
    )


def _late(job_id: str, record: QuestionRecord) -> StalePauseError:
    return _stale(
        f"the answer came after the {record.timeout_s:g} s answer timeout of job {job_id!r}: "
        "the question failed unanswered",
        record.pause_id,
        None,
    )


def _accepted(job_id: str, record: QuestionRecord) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "accepted": True,
        "pause_id": record.pause_id,
        "round": record.round,
        "call_index": record.call_index,
        "answer": record.answer,
    }


def answer_of(reply: Any) -> Any:
    """The answer of an accepted reply of ``tandem.answer``; a refusal raised as its error
    (``StalePauseError``, ``InvalidAnswer``, ``DecisionTimeout`` for a withdrawn one, else
    ``DecisionRefused``)."""
    if not isinstance(reply, dict):
        raise DecisionRefused(f"tandem.answer replied {reply!r}, not an answer's reply")
    if reply.get("accepted"):
        return reply.get("answer")
    error = str(reply.get("error") or "the answer was refused; nothing was answered")
    reason = reply.get("reason")
    if reason == "stale_pause":
        raise StalePauseError(error, pause_id=reply.get("pause_id"), current_pause=reply.get("current_pause"))
    if reason == "invalid_answer":
        raise InvalidAnswer(error)
    if reason == "withdrawn":
        raise DecisionTimeout(error)
    raise DecisionRefused(error)
