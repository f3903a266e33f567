"""Showing a job as it runs: one line or block per event of the job's stream, tokens as they come.

``render_event`` gives the text of one event; ``LiveDisplay`` prints a stream of them, writing
``model_delta`` text as it arrives (reasoning dimmed on a terminal) and then only the parts of the
stored reply that were not already shown.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping
from typing import Any, TextIO

from tandem.reasoner.function_calling import extract_tag, parse_function_calls, replace_calls, strip_thinking
from tandem.tasks.job_events import (
    ApprovalDecided,
    ApprovalRequested,
    Final,
    JobEvent,
    JobStarted,
    MemoryCompacted,
    MessageReceived,
    ModelDelta,
    ModelReply,
    OtherEvent,
    QuestionAnswered,
    QuestionAsked,
    RoundStarted,
    ToolCall,
    ToolResult,
    Waiting,
    read_event,
)


def _short(text: str, limit: int = 400) -> str:
    text = re.sub(r"\s+\n", "\n", text.strip())
    return text if len(text) <= limit else f"{text[:limit]} …[{len(text) - limit} more characters]"


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def _typed(event: JobEvent | Mapping[str, Any]) -> JobEvent:
    if isinstance(event, Mapping):  # the plain-dict form of earlier versions
        return read_event(str(event.get("id", "")), str(event["type"]), dict(event.get("data") or {}))
    return event


def render_event(event: JobEvent | Mapping[str, Any], *, streamed: bool = False) -> str:
    """The text shown for one event (empty for events not worth a line).

    ``streamed``: the reply's text was already shown from its ``model_delta`` events, so a
    ``model_reply`` shows only what follows from it (tool calls in the action, a deliverable).
    """
    typed = _typed(event)
    if isinstance(typed, ModelDelta | OtherEvent):
        return ""
    if isinstance(typed, ModelReply):
        return _after_stream(typed) if streamed else _reply(typed)
    if isinstance(typed, Waiting):
        retry = f", retrying in {typed.retry_in:.0f} s" if typed.retry_in is not None else ""
        on = f" on {typed.host}" if typed.host else ""
        return f"  … waiting: {typed.reason}{on}{retry} {typed.detail}".rstrip()
    if isinstance(typed, JobStarted):
        spec = typed.spec
        budget = f"{spec.get('reasoner', 'dual')} reasoner, up to {spec.get('max_rounds')} rounds"
        where = f"the {typed.step} step of round {typed.round + 1}"
        if typed.resumed:
            return f"\njob resumed at {where}: {budget}"
        if typed.forked_from:
            kept = f"its first {typed.forked_round} rounds"
            return f"job forked from {typed.forked_from} ({kept}), going on at {where}: {budget}"
        return f"job started: {budget}"
    if isinstance(typed, RoundStarted):
        return f"\n── round {typed.round + 1} of {typed.max_rounds} " + "─" * 40
    if isinstance(typed, ToolCall):
        args = ", ".join(f"{k}={v!r}" for k, v in typed.args.items())
        again = f" (run again: attempt {typed.attempt})" if typed.attempt > 1 else ""
        return f"  → tool call {typed.index}: {typed.name}({_short(args, 200)}){again}"
    if isinstance(typed, ToolResult):
        return f"  ← result {typed.index} [{typed.status}]: {_short(str(typed.output), 300)}"
    if isinstance(typed, ApprovalRequested):
        calls = "; ".join(f"{p.index}. {p.tool}({_short(str(p.args), 200)})" for p in typed.pending)
        pause = f" (pause {typed.pause_id})" if typed.pause_id else ""
        return f"  ⏸ waiting for approval{pause}: {calls}  (decide with `tandem approve JOB`)"
    if isinstance(typed, ApprovalDecided):
        done = "; ".join(
            f"{d.index} " + ("approved" if d.approve else f"rejected: {d.reason}") for d in typed.decisions
        )
        return f"  ✓ decided ({typed.by}): {done}"
    if isinstance(typed, QuestionAsked):
        schema = (
            f" (answer fits {_short(json.dumps(typed.answer_schema), 200)})" if typed.answer_schema else ""
        )
        return (
            f"  ? waiting for an answer (pause {typed.pause_id}): {_short(typed.question, 300)}{schema}"
            "  (answer with `tandem answer JOB ANSWER`)"
        )
    if isinstance(typed, QuestionAnswered):
        said = "no answer in time" if typed.by == "timeout" else _short(json.dumps(typed.answer), 200)
        return f"  ✓ answered ({typed.by}): {said}"
    if isinstance(typed, MessageReceived):
        return f"  ✉ message from the person (read in round {typed.round + 1}): {_short(typed.text, 300)}"
    if isinstance(typed, MemoryCompacted):
        first, last = [*typed.rounds, 0, 0][:2]
        rounds = f"round {first + 1}" if first == last else f"rounds {first + 1}–{last + 1}"
        how = "summarized" if typed.how == "summarized" else "left out"
        return (
            f"  ⇣ memory compacted: {rounds}, {typed.tokens_before:,} → {typed.tokens_after:,} tokens "
            f"({how} for the {typed.role}'s request of round {typed.round + 1}; "
            "the originals are kept)"
        )
    if isinstance(typed, Final):
        return _final(typed)
    return ""


def _reply(reply: ModelReply) -> str:
    content = reply.content
    lines = [f"{reply.role.capitalize()} ({reply.model or 'model'}):"]
    if reply.reasoning:
        lines.append(_indent("reasoning: " + _short(reply.reasoning, 300)))
    if reply.role == "thinker":
        instruction = extract_tag(content, "instruction")
        given = extract_tag(content, "input")
        lines.append(_indent("instruction: " + _short(instruction or strip_thinking(content))))
        if given:
            lines.append(_indent("input: " + _short(given, 300)))
        return "\n".join(lines)
    action = extract_tag(content, "action")
    deliverable = extract_tag(content, "deliverable")
    if action:
        summary = replace_calls(action)  # a payload holding </function_call> stays in its call
        lines.append(_indent("action: " + _short(summary)))
    if deliverable is not None:
        lines.append(_indent("(deliverable written)"))
    if not action and deliverable is None:
        lines.append(_indent(_short(strip_thinking(content))))
    return "\n".join(lines)


def _final(final: Final) -> str:
    lines = [
        "\n══ " + f"{final.status.upper()} after {final.rounds} round(s); "
        f"{final.usage.calls} model calls, {final.usage.total_tokens} tokens",
    ]
    if final.error:
        lines.append(f"error: {final.error}")
    if final.deliverable:
        lines.append("deliverable:\n" + _indent(final.deliverable.strip(), "  "))
    return "\n".join(lines)


def _after_stream(reply: ModelReply) -> str:
    notes = []
    if reply.role != "thinker":
        action = extract_tag(reply.content, "action") or ""
        calls = len(parse_function_calls(action))
        if calls:
            notes.append(f"{calls} tool call(s)")
        if extract_tag(reply.content, "deliverable") is not None:
            notes.append("deliverable written")
    return _indent(f"({'; '.join(notes)})") if notes else ""


class LiveDisplay:
    """Prints a job's events to ``out`` as they arrive; ``tokens`` shows ``model_delta`` text live.

    ``color`` dims reasoning with ANSI codes (on by default when ``out`` is a terminal).
    """

    def __init__(self, out: TextIO | None = None, *, tokens: bool = True, color: bool | None = None) -> None:
        self.out = out or sys.stdout
        self.tokens = tokens
        self.color = self.out.isatty() if color is None else color
        self._reply: tuple[int, str, str] | None = None  # (round, role, attempt) being streamed
        self._part = ""  # "reasoning" or "content": what the last delta wrote
        self._streamed: set[tuple[int, str]] = set()

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def _end_line(self) -> None:
        if self._reply is not None:
            self._write("\n")
            self._reply, self._part = None, ""

    def _delta(self, delta: ModelDelta) -> None:
        key = (delta.round, delta.role, delta.attempt)
        if self._reply != key:
            restarted = (delta.round, delta.role) in self._streamed
            self._end_line()
            note = " (the model call started over)" if restarted else ""
            self._write(f"{delta.role.capitalize()} (streaming){note}:\n")
            self._reply = key
            self._streamed.add((delta.round, delta.role))
        if delta.reasoning:
            if self._part != "reasoning":
                self._write("    thinking: " if not self._part else "\n    thinking: ")
            text = delta.reasoning.replace("\n", "\n    ")
            self._write(f"\x1b[2m{text}\x1b[0m" if self.color else text)
            self._part = "reasoning"
        content = delta.content if self._part == "content" else delta.content.lstrip("\n")
        if content:
            if self._part != "content":
                self._write("\n    " if self._part else "    ")
            self._write(content.replace("\n", "\n    "))
            self._part = "content"

    def show(self, event: JobEvent | Mapping[str, Any]) -> None:
        """Print one event."""
        typed = _typed(event)
        if isinstance(typed, ModelDelta):
            if self.tokens:
                self._delta(typed)
            return
        self._end_line()
        streamed = typed.type == "model_reply" and (typed.data.get("round"), typed.data.get("role")) in (
            self._streamed
        )
        text = render_event(typed, streamed=streamed)
        if text:
            print(text, file=self.out, flush=True)


def show_events(
    events: Iterable[JobEvent | Mapping[str, Any]], out: TextIO | None = None, *, tokens: bool = True
) -> Final | None:
    """Print every event as it arrives (tokens too, unless ``tokens=False``); return the ``final`` event."""
    display = LiveDisplay(out, tokens=tokens)
    final = None
    for event in events:
        typed = _typed(event)
        display.show(typed)
        if isinstance(typed, Final):
            final = typed
    return final
