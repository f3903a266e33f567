"""Model hosts for the event-order breaking tests: the plan models of ``tests.integration.plan_model``
(dual and mono) and a native tool-calling one (ReAct), streamed, with faults a test queues for one
job's round and role: an HTTP error (429, 500, 401), a stream broken after some chunks, or a
``Gate`` that holds a stream after some chunks until the test opens it (to kill or pause the
worker reading it at a known point, with no wall-clock guess).

A job is named in its goal by a label, ``[[name]]``; a model request's round is the number of
assistant turns it carries.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from tests.integration import plan_model
from tests.integration.conftest import Cluster, _cluster_on, _exclusive_db
from tests.openai_server import OpenAIServer, RecordedRequest, Reply

_LABEL = re.compile(r"\[\[([\w.-]+)\]\]")
_GOAL = re.compile(r"<goal>(.*?)</goal>", re.S)

STREAMING = {"TANDEM_THINKER_STREAM": "true", "TANDEM_ACTOR_STREAM": "true"}
FAST_LEASES = {"TANDEM_LEASE_SECONDS": "2", "TANDEM_STALL_SECONDS": "4"}
TOOLKIT = {"TANDEM_TOOLKIT": "tests.integration.event_tools:toolkit", "TANDEM_TOOL_TIMEOUT": "60"}
"""add, sleep_tool, boom, hang, notify (needs approval), book_trip (asks a person) and held (runs
until the test releases it)."""


def goal(label: str, plan: list[list[dict[str, Any]]] | None = None, *, never_done: bool = False) -> str:
    """A goal naming its job ``label`` and carrying ``plan`` (one list of tool calls per round)."""
    text = f"[[{label}]] " + ("NEVER_DONE " if never_done else "")
    return plan_model.goal_with_plan(text, plan) if plan is not None else text + "deliver"


def add(a: int, b: int) -> dict[str, Any]:
    return {"name": "add", "args": {"a": a, "b": b}}


class Gate:
    """Holds a stream after ``after`` chunks (the first chunk only opens the message: no text) until
    ``open``; ``reached`` is set when it holds, ``done`` once the stream was written to its end."""

    def __init__(self, after: int) -> None:
        self.after = after
        self.reached = threading.Event()
        self.opened = threading.Event()
        self.done = threading.Event()

    def open(self) -> None:
        self.opened.set()

    def hold(self, chunks: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for i, chunk in enumerate(chunks):
            if i == self.after:
                self.reached.set()
                self.opened.wait(600)
            yield chunk
        self.done.set()


@dataclasses.dataclass
class GatedReply(Reply):
    gate: Gate | None = None
    error_after: int | None = None
    """Stream this many chunks, then an error event (``data: {"error": ...}``) and the end."""
    error_code: int = 500


class GatedServer(OpenAIServer):
    """An ``OpenAIServer`` whose streams a ``GatedReply`` holds at its gate, or ends with an
    error event after some chunks (as OpenAI and vLLM report an error that comes mid-stream)."""

    def stream_chunks(self, reply: Reply, request: Any) -> Any:
        chunks = super().stream_chunks(reply, request)
        if isinstance(reply, GatedReply) and reply.error_after is not None:
            error = {
                "message": "the engine failed mid-stream",
                "type": "server_error",
                "code": reply.error_code,
            }
            chunks = [*chunks[: reply.error_after], {"error": error}]
        gate = getattr(reply, "gate", None)
        return chunks if gate is None else gate.hold(chunks)


Fault = Callable[[Reply], Reply]


def status(code: int, retry_after: float | None = None) -> Fault:
    """Answer HTTP ``code`` instead (with ``Retry-After`` when given)."""
    headers = {} if retry_after is None else {"Retry-After": f"{retry_after:g}"}
    return lambda _reply: Reply(status=code, headers=headers)


def broken(after: int, pace: float = 0.12) -> Fault:
    """Stream the reply, ``pace`` s between chunks, and cut the connection after ``after`` chunks."""
    return lambda reply: dataclasses.replace(reply, break_after=after, chunk_delay=pace)


def gated(gate: Gate, pace: float = 0.12) -> Fault:
    """Stream the reply, ``pace`` s between chunks, holding it at ``gate``."""
    return lambda reply: GatedReply(
        **{f.name: getattr(reply, f.name) for f in dataclasses.fields(Reply)} | {"chunk_delay": pace},
        gate=gate,
    )


def error_midstream(after: int, code: int = 500, pace: float = 0.12) -> Fault:
    """Stream ``after`` chunks of the reply (HTTP 200), then an error event with ``code``, then end."""
    return lambda reply: GatedReply(
        **{f.name: getattr(reply, f.name) for f in dataclasses.fields(Reply)} | {"chunk_delay": pace},
        error_after=after,
        error_code=code,
    )


def label_of(request: RecordedRequest) -> str:
    for m in request["messages"]:
        found = _LABEL.search(str(m.get("content") or ""))
        if found:
            return found.group(1)
    return ""


def round_of(request: RecordedRequest) -> int:
    return sum(1 for m in request["messages"] if m["role"] == "assistant")


def react(request: RecordedRequest) -> Reply:
    """A native tool-calling model following the plan in its goal: one step of calls per turn,
    then an answer naming the results it read."""
    text = " ".join(str(m.get("content") or "") for m in request["messages"][:2])
    found = _GOAL.search(text)
    body = found.group(1) if found else text
    plan = json.loads(body.split("PLAN:", 1)[1]) if "PLAN:" in body else []
    step = round_of(request)
    if step < len(plan):
        return Reply(
            reasoning_content=f"step {step}: I call {len(plan[step])} tools",
            tool_calls=[
                {"id": f"call-{step}-{i}", "name": c["name"], "arguments": c["args"]}
                for i, c in enumerate(plan[step], start=1)
            ],
        )
    results = [str(m["content"]) for m in request["messages"] if m["role"] == "tool"]
    return Reply(reasoning_content="all done", content=f"react done: {' | '.join(results)}")


class Hosts:
    """The thinker and actor hosts of one cluster, with faults queued per (label, role, round)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: dict[tuple[str, str, int], list[Fault]] = {}
        self.pace: dict[str, float] = {}
        """Seconds between streamed chunks of every reply of a label (to interleave jobs)."""
        self.thinker = GatedServer(self._answer("thinker"))
        self.actor = GatedServer(self._answer("actor"))

    def fault(self, label: str, role: str, round_no: int, *faults: Fault) -> None:
        """Answer the next requests of ``label``'s ``role`` in ``round_no`` with ``faults``, in order."""
        with self._lock:
            self._faults.setdefault((label, role, round_no), []).extend(faults)

    def requests(self, label: str, role: str, round_no: int | None = None) -> list[RecordedRequest]:
        server = self.thinker if role == "thinker" else self.actor
        return [
            r
            for r in server.requests
            if label_of(r) == label and (round_no is None or round_of(r) == round_no)
        ]

    def _answer(self, role: str) -> Callable[[RecordedRequest], Reply]:
        def answer(request: RecordedRequest) -> Reply:
            if role == "thinker":
                reply = plan_model.thinker(request)
            elif request.get("tools"):
                reply = react(request)
            elif "on your own" in str(request["messages"][0]["content"]):
                reply = plan_model.mono(request)
            else:
                reply = plan_model.actor(request)
            label = label_of(request)
            if label in self.pace:
                reply = dataclasses.replace(reply, chunk_delay=self.pace[label])
            with self._lock:
                queued = self._faults.get((label, role, round_of(request)))
                fault = queued.pop(0) if queued else None
            return fault(reply) if fault else reply

        return answer

    def __enter__(self) -> Hosts:
        self.thinker.start()
        self.actor.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.thinker.stop()
        self.actor.stop()


@contextmanager
def streaming_cluster(redis_base: str, **env: str) -> Iterator[tuple[Cluster, Hosts]]:
    """A cluster (no workers yet) on a Redis database of its own whose roles stream from ``Hosts``."""
    with Hosts() as hosts, _exclusive_db() as db:
        urls = {"TANDEM_THINKER_API_BASE": hosts.thinker.url, "TANDEM_ACTOR_API_BASE": hosts.actor.url}
        clusters = _cluster_on(f"{redis_base}/{db}", **{**STREAMING, **TOOLKIT, **urls, **env})
        cluster, _, _ = next(clusters)
        try:
            yield cluster, hosts
        finally:
            next(clusters, None)
