"""Scripted model hosts and a token count for the breaking tests of context budgets (issue 34).

The Thinker follows flags in the job's goal (``<goal>`` of its request) and the round note of its
request, so it never counts the turns it sees (rounds left out of a request would skew such a
count). At round ``k`` (from 1) it instructs one call, ``page(n=k-1, kb)``, with ``kb`` 20 for an
even ``n`` (kept as an artifact) and 3 for an odd one (shown whole), unless a flag says otherwise:

* ``ROUNDS=R``: at round ``R`` it says TASK_DONE, and whether it sees ``NEEDLE`` in its request;
* ``NEVER_DONE``: it never says TASK_DONE (the job is truncated at ``max_rounds``);
* ``READ_AT=k``: at round ``k`` it instructs ``read_artifact`` of page 0's end (page 0's handle);
* ``ASK_AT=k``: at round ``k`` it instructs ``ask_person`` (which codeword to use);
* ``SLOW_AT=k``: at round ``k`` the call is ``slow_page`` (``SLOW_SECONDS`` long);
* ``NOTIFY_AT=k``: at round ``k`` the call is ``notify`` (it needs a person's approval);
* ``KB=x``: every page is ``x`` thousand characters (none kept as an artifact when under 8).

The Actor is ``tests.integration.plan_model.actor``: it writes the calls of the instruction's
``<input>`` as ``<function_call>`` blocks, and the deliverable once told TASK_DONE.

``estimate`` counts tokens by the rule docs/context.md states for a model without a tokenizer:
three ASCII letters or spaces a token, a token per digit, punctuation mark and line break, a token
per UTF-8 byte of other scripts (written from the docs, not taken from tandem).
"""

from __future__ import annotations

import json
import math
import re
import threading
from typing import Any

from tests.integration.breaking_context_tools import NEEDLE, handle_of, page_text
from tests.openai_server import RecordedRequest, Reply

SLOW_SECONDS = 8
_GOAL = re.compile(r"<goal>(.*?)</goal>", re.S)
_ROUND = re.compile(r"\[Round (\d+) of")


def text_of(request: RecordedRequest) -> str:
    """Every message's content of a request, joined."""
    return "\n".join(str(m.get("content") or "") for m in request["messages"])


def goal_of(request: RecordedRequest) -> str:
    found = _GOAL.search(text_of(request))
    return found.group(1) if found else ""


def round_of(request: RecordedRequest) -> int:
    """The round the request is for (from 1), by its round note (0 when it has none)."""
    found = _ROUND.findall(text_of(request))
    return int(found[-1]) if found else 0


def flag(goal: str, name: str) -> int | None:
    found = re.search(rf"\b{name}=(\d+)", goal)
    return int(found.group(1)) if found else None


def page_kb(goal: str, n: int) -> int:
    fixed = flag(goal, "KB")
    if fixed is not None:
        return fixed
    return 20 if n % 2 == 0 else 3


def needle_handle(goal: str) -> tuple[str, int]:
    """Page 0's artifact handle and its length."""
    text = page_text(0, page_kb(goal, 0))
    return handle_of(0, 1, text), len(text)


def instruction(k: int) -> str:
    return f"INSTR-{k}: run these calls."


def thinker(request: RecordedRequest) -> Reply:
    goal = goal_of(request)
    k = round_of(request)
    done = flag(goal, "ROUNDS")
    if done is not None and k >= done and "NEVER_DONE" not in goal:
        seen = "yes" if NEEDLE in text_of(request) else "no"
        return Reply(f"<instruction>TASK_DONE: deliver. needle-seen={seen}</instruction>\n<input>[]</input>")
    n = k - 1
    kb = page_kb(goal, n)
    call: dict[str, Any] = {"name": "page", "args": {"n": n, "kb": kb}}
    if flag(goal, "READ_AT") == k:
        handle, length = needle_handle(goal)
        call = {"name": "read_artifact", "args": {"handle": handle, "offset": length - 200, "length": 200}}
    elif flag(goal, "ASK_AT") == k:
        call = {"name": "ask_person", "args": {"question": "Which codeword should the report use?"}}
    elif flag(goal, "NOTIFY_AT") == k:
        call = {"name": "notify", "args": {"to": "ann@example.com"}}
    elif flag(goal, "SLOW_AT") == k:
        call = {"name": "slow_page", "args": {"n": n, "kb": kb, "seconds": SLOW_SECONDS}}
    return Reply(
        f"<deep_thinking>round {k}</deep_thinking>\n<instruction>{instruction(k)}</instruction>\n"
        f"<input>{json.dumps([call])}</input>"
    )


class Gate:
    """Holds the Thinker's first request of one round until released (a worker is killed meanwhile)."""

    def __init__(self, round_: int) -> None:
        self.round = round_
        self.reached = threading.Event()
        self.release = threading.Event()
        self.used = False
        self.lock = threading.Lock()

    def __call__(self, request: RecordedRequest) -> Reply:
        if round_of(request) == self.round:
            with self.lock:
                first = not self.used
                self.used = True
            if first:
                self.reached.set()
                self.release.wait(300)
        return thinker(request)


def estimate(text: str) -> int:
    """Tokens of ``text`` by docs/context.md's conservative rule."""
    letters = other = 0
    for ch in text:
        if ch.isascii():
            if ch.isalpha() or ch == " ":
                letters += 1
            else:
                other += 1
        else:
            other += len(ch.encode("utf-8"))
    return math.ceil(letters / 3) + other


def request_tokens(request: RecordedRequest) -> int:
    """A request's tokens by ``estimate``: every message's content and tool calls, and the tools offered."""
    total = 0
    for m in request["messages"]:
        total += estimate(str(m.get("content") or ""))
        if m.get("tool_calls"):
            total += estimate(json.dumps(m["tool_calls"]))
    if request.get("tools"):
        total += estimate(json.dumps(request["tools"]))
    return total


def reply_cap(request: RecordedRequest) -> int | None:
    """The reply's cap the request sent (``max_tokens`` or ``max_completion_tokens``)."""
    for name in ("max_tokens", "max_completion_tokens"):
        if request.get(name) is not None:
            return int(request[name])
    return None


def always_page(request: RecordedRequest) -> Reply:
    """An Actor that calls ``page(n=<round - 1>, kb=3)`` whatever it was told, and delivers once told
    TASK_DONE: the tool outputs of a job whose Thinker is a real model that follows no protocol."""
    if "TASK_DONE" in str(request["messages"][-1].get("content") or ""):
        return Reply("<shallow_thinking>done</shallow_thinking>\n<deliverable>read the pages</deliverable>")
    call = {
        "name": "page",
        "call_objective": "read on",
        "args": {"n": max(round_of(request) - 1, 0), "kb": 3},
    }
    return Reply(f"<action>\n<function_call>\n{json.dumps(call)}\n</function_call>\n</action>")


UNANSWERED = (
    "An assistant message with 'tool_calls' must be followed by tool messages "
    "responding to each 'tool_call_id'"
)


def pairing_error(request: RecordedRequest) -> str | None:
    """What OpenAI's API answers 400 for in a request's messages: a ``tool`` message that answers no
    tool call of the assistant message before it, or a tool call left without its ``tool`` message."""
    pending: set[str] = set()
    for m in request["messages"]:
        if m["role"] == "tool":
            if m.get("tool_call_id") not in pending:
                return (
                    "messages with role 'tool' must be a response to a preceeding message with 'tool_calls'"
                )
            pending.discard(m["tool_call_id"])
            continue
        if pending:
            return UNANSWERED
        if m["role"] == "assistant" and m.get("tool_calls"):
            pending = {tc["id"] for tc in m["tool_calls"]}
    if pending:
        return UNANSWERED
    return None


REACT_PAGES = 14


def react_host(request: RecordedRequest) -> Reply:
    """A ReAct model behind an OpenAI-strict host: it refuses a request whose tool calls and results
    do not pair; else it asks for the page after the last one it sees, ``REACT_PAGES`` in all."""
    error = pairing_error(request)
    if error:
        return Reply(status=400, error=f"Invalid parameter: {error}.")
    results = [str(m.get("content") or "") for m in request["messages"] if m["role"] == "tool"]
    seen = re.findall(r"PAGE-(\d+)-START", results[-1]) if results else []
    n = int(seen[-1]) + 1 if seen else 0
    if n >= REACT_PAGES:
        return Reply("I have read every page. The archive is complete.")
    return Reply(tool_calls=[{"id": f"call_{n}", "name": "page", "arguments": {"n": n, "kb": 3}}])
