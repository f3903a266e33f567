"""Questions to a person: the built-in ``ask_person`` tool, answer checks, and the in-process asker.

A tool asks through ``ToolCallContext.ask(question, schema)``; the model asks through the
built-in ``ask_person`` tool (offered when ``Task.ask_person`` / ``JobSpec.ask_person`` is set),
which does the same and returns the answer as the call's result. Who answers depends on the
driver: in process, the reasoner's ``ask`` callback (sync or async, given a ``Question``); on
workers, a person through ``tandem.answer`` while the job is parked
(``tandem.tasks.control.questions``). Either way the answer is checked against the question's
JSON schema (``check_answer``) and no answer within ``answer_timeout_s`` raises ``NoAnswer``,
which the tool (or the model, reading ``ask_person``'s FAILED result) sees and goes on.

Everything here is pure or in-process; nothing imports Celery.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from typing import Any

from tandem.toolkit.context import Question, ToolCallContext
from tandem.toolkit.errors import NoAnswer, QuestionError
from tandem.toolkit.tool import Tool

__all__ = [
    "ASK_PERSON",
    "AskCallback",
    "InProcessAsker",
    "ask_person",
    "ask_person_tool",
    "asking",
    "check_answer",
    "current_asker",
]

ASK_PERSON = "ask_person"
"""The name of the built-in tool the model asks a person with."""

AskCallback = Callable[[Question], Any] | Callable[[Question], Awaitable[Any]]
"""The reasoner's ``ask``: given the ``Question``, the person's answer (a JSON value)."""

_current: ContextVar[InProcessAsker | None] = ContextVar("tandem_asker", default=None)


def check_answer(answer: Any, schema: dict[str, Any] | None) -> Any:
    """``answer`` if it is a JSON value that fits ``schema`` (``None``: any JSON value); else
    ``QuestionError`` naming the field and the reason (what a person or client is told)."""
    try:
        json.dumps(answer, allow_nan=False)
    except (TypeError, ValueError):
        raise QuestionError(f"the answer must be a JSON value, got {answer!r:.80}") from None
    if schema is None:
        return answer
    import jsonschema

    try:
        jsonschema.validate(answer, schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(the answer)"
        raise QuestionError(f"the answer does not fit its schema: field {where!r}: {exc.message}") from None
    return answer


def ask_person(
    question: str, answer_schema: dict[str, Any] | None = None, *, context: ToolCallContext
) -> str:
    """Ask the person you work for a question and wait for the answer. Use it when you need a fact
    or a choice only they can give. answer_schema: a JSON schema the answer must fit (leave it out
    for a free-text answer)."""
    answer = context.ask(question, answer_schema)
    return answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)


def ask_person_tool(timeout_s: float | None = None) -> Tool:
    """The built-in ``ask_person`` tool; its own timeout outlasts the answer's (``timeout_s``), so
    the question's timeout, not the tool's, ends a wait."""
    tool = Tool.from_function(ask_person, name=ASK_PERSON)
    tool.timeout = None if timeout_s is None else timeout_s + 30.0
    return tool


class InProcessAsker:
    """Answers ``ToolCallContext.ask`` in process: runs the reasoner's ``ask`` callback (an async
    one to completion) for at most ``timeout_s`` seconds, then checks the answer."""

    def __init__(self, callback: AskCallback | None, timeout_s: float | None = None) -> None:
        self.callback = callback
        self.timeout_s = timeout_s

    def __call__(self, question: Question) -> Any:
        if self.callback is None:
            raise QuestionError(
                "no person can be asked here: the reasoner has no ask callback "
                "(pass ask=... to the reasoner, or run the job on workers)"
            )
        callback = self.callback
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                answer = callback(question)
                if inspect.isawaitable(answer):
                    answer = asyncio.run(_awaited(answer))
                box["answer"] = answer
            except BaseException as exc:
                box["error"] = exc

        # A thread, so a person who never answers cannot hold the run past the timeout.
        thread = threading.Thread(target=run, name="tandem-ask", daemon=True)
        thread.start()
        thread.join(self.timeout_s)
        if thread.is_alive():
            raise NoAnswer(self.timeout_s or 0)
        if "error" in box:
            error = box["error"]
            if isinstance(error, QuestionError):
                raise error
            raise QuestionError(f"the ask callback failed: {type(error).__name__}: {error}") from error
        return check_answer(box.get("answer"), question.answer_schema)


async def _awaited(answer: Awaitable[Any]) -> Any:
    return await answer


def current_asker() -> InProcessAsker | None:
    """The asker of the in-process run in progress in this context, if any."""
    return _current.get()


@contextlib.contextmanager
def asking(callback: AskCallback | None, timeout_s: float | None) -> Iterator[None]:
    """Within the block, tool contexts built for the run answer ``ask`` through ``callback``."""
    token = _current.set(InProcessAsker(callback, timeout_s))
    try:
        yield
    finally:
        _current.reset(token)
