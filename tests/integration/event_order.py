"""The order of a job's events as docs/events.md ("The order of events") promises it, checked on
what each reader a user has delivers: the stream itself (``XRANGE``), ``JobHandle.events()`` and
``aevents()``, the SSE of ``tandem api`` (with a dropped link resumed by ``Last-Event-ID``) and
``tandem.Client.events()``.

Written from the docs alone, by a tester who did not write the code: ``order_problems`` lists every
place a stream breaks the promise, ``documented_reader`` replays the stream the way the page tells
a reader to, and shows what such a reader would take each model reply to be.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from redis import Redis

from tandem.workers.embedded import free_port

Event = dict[str, Any]
ROUND_EVENTS = ("model_delta", "model_reply", "tool_call", "tool_result")
"""The events point 2 files under their round."""
AFTER_FINAL = ("webhook_delivered", "webhook_failed")
"""What may follow a run's ``final`` (besides a resumed run's ``job_started``)."""


def describe(index: int, e: Event) -> str:
    """``#7 model_delta(round=1, role=thinker, attempt=ab12, seq=0)``: an event, for messages."""
    keys = ("round", "role", "attempt", "seq", "index", "resumed", "status")
    fields = ", ".join(f"{k}={e[k]}" for k in keys if e.get(k) not in (None, ""))
    return f"#{index} {e['type']}({fields})"


def compact(events: list[Event]) -> str:
    """The stream, one line per event, for failure messages."""
    lines = []
    for i, e in enumerate(events):
        extra = {k: e[k] for k in ("content", "reasoning", "output", "name", "step", "by") if e.get(k)}
        shown = {k: (v if len(str(v)) < 40 else str(v)[:37] + "...") for k, v in extra.items()}
        lines.append(f"{describe(i, e)} {e['id']} {shown if shown else ''}".rstrip())
    return "\n" + "\n".join(lines)


def _stream_key(event_id: str) -> tuple[int, int]:
    ms, _, seq = event_id.partition("-")
    return int(ms), int(seq or 0)


def _text(e: Event) -> tuple[str, str]:
    return str(e.get("reasoning") or ""), str(e.get("content") or "")


def order_problems(
    events: list[Event], *, late_tokens: bool = False, streaming: bool = True, ended: bool = True
) -> list[str]:
    """Every break of the documented order in ``events`` (one job's, in stream order).

    ``late_tokens``: the run had a worker cut off past its lease (SIGSTOP), so ``model_delta``
    events of an attempt that never got its ``model_reply`` may come late (point 5).
    ``streaming``: both roles stream, so every ``model_reply`` with text is spelled by the deltas
    of one attempt before it (point 4). ``ended``: the job has ended, so its last run has a ``final``.
    """
    problems: list[str] = []
    if not events:
        return ["the stream is empty"]
    if events[0]["type"] != "job_started":
        problems.append(f"the first event is {describe(0, events[0])}, not job_started")
    keys = [_stream_key(e["id"]) for e in events]
    problems += [
        f"{describe(i, events[i])}: id {events[i]['id']} does not grow after {events[i - 1]['id']}"
        for i in range(1, len(events))
        if keys[i] <= keys[i - 1]
    ]
    started: dict[int, int] = {}
    highest = -1
    run_open = False
    replies: dict[tuple[int, str], int] = {}
    replied_attempt: dict[tuple[int, str], str] = {}
    attempts: dict[tuple[int, str], list[str]] = {}
    deltas: dict[tuple[int, str, str], list[tuple[str, str]]] = {}
    late: list[tuple[int, int, str, str]] = []
    tool_calls: set[tuple[int, int, Any]] = set()
    tool_results: set[tuple[int, int]] = set()
    for i, e in enumerate(events):
        kind, what = e["type"], describe(i, e)
        if kind == "job_started":
            if run_open:
                problems.append(f"{what}: a run starts before the previous run's final")
            run_open = True
            continue
        is_late = False
        if not run_open and kind not in AFTER_FINAL:
            if kind == "model_delta" and late_tokens:
                is_late = True
            else:
                problems.append(f"{what} comes after final (final ends its run)")
        if kind == "final":
            run_open = False
            continue
        if kind == "round_started":
            r = int(e["round"])
            started[r] = started.get(r, 0) + 1
            if started[r] > 1:
                problems.append(f"{what}: round {r} starts again (round_started #{started[r]})")
            elif r <= highest:
                problems.append(f"{what} after round_started(round={highest})")
            highest = max(highest, r)
            continue
        if kind not in ROUND_EVENTS:
            continue
        r = int(e["round"])
        if r not in started:
            problems.append(f"{what} before its round's round_started(round={r})")
        elif r < highest:
            if kind == "model_delta" and late_tokens:
                is_late = True
            else:
                problems.append(f"{what} after round_started(round={highest}): rounds interleave")
        if kind == "model_delta":
            key, attempt = (r, str(e["role"])), str(e["attempt"])
            if key in replies:
                if late_tokens:
                    is_late = True
                else:
                    problems.append(f"{what} after its round and role's model_reply ({replies[key]})")
            spelled = deltas.setdefault((r, key[1], attempt), [])
            if not spelled:
                attempts.setdefault(key, []).append(attempt)
            if e.get("seq") != len(spelled):
                problems.append(f"{what}: seq {e.get('seq')} where {len(spelled)} comes next in its attempt")
            spelled.append(_text(e))
            if is_late:
                late.append((i, r, key[1], attempt))
        elif kind == "model_reply":
            key = (r, str(e["role"]))
            if key in replies:
                problems.append(f"{what}: a second model_reply of round {r} {key[1]} (first #{replies[key]})")
                continue
            replies[key] = i
            text = _text(e)
            if streaming and any(text):
                spelling = [
                    a
                    for a in attempts.get(key, [])
                    if tuple("".join(part) for part in zip(*deltas[(r, key[1], a)], strict=True)) == text
                ]
                if not spelling:
                    tried = {a: len(deltas[(r, key[1], a)]) for a in attempts.get(key, [])}
                    problems.append(
                        f"{what}: no attempt's deltas before it spell its text {text!r} "
                        f"(attempts and their delta counts: {tried})"
                    )
                else:
                    replied_attempt[key] = spelling[-1]
        elif kind == "tool_call":
            call = (r, int(e["index"]), e.get("attempt"))
            if call in tool_calls:
                problems.append(f"{what}: the same call and attempt announced twice")
            tool_calls.add(call)
        else:
            result = (r, int(e["index"]))
            if result in tool_results:
                problems.append(f"{what}: a second tool_result of call {result}")
            tool_results.add(result)
    for i, r, role, attempt in late:
        if replied_attempt.get((r, role)) == attempt:
            problems.append(f"{describe(i, events[i])}: a late token of the attempt whose reply was written")
    if ended and run_open:
        problems.append(f"the job ended but its last run has no final (last: {describe(-1, events[-1])})")
    return problems


def replies_of(events: list[Event]) -> dict[tuple[int, str], tuple[str, str]]:
    """Each round and role's ``model_reply`` text (reasoning, content)."""
    return {(int(e["round"]), str(e["role"])): _text(e) for e in events if e["type"] == "model_reply"}


def documented_reader(events: list[Event]) -> dict[tuple[int, str], tuple[str, str]]:
    """What a reader that follows docs/events.md shows as each reply when its ``model_reply``
    comes: it drops a delta that comes after ``final``, whose round is older than the last
    ``round_started``, or whose round and role have their ``model_reply``, and starts the reply
    over when a new ``attempt`` begins."""
    shown: dict[tuple[int, str], tuple[str, str]] = {}
    text: dict[tuple[int, str], tuple[str, str]] = {}
    begun: set[tuple[int, str, str]] = set()
    replied: set[tuple[int, str]] = set()
    last_round, ended = -1, False
    for e in events:
        kind = e["type"]
        if kind == "job_started":
            ended = False
        elif kind == "final":
            ended = True
        elif kind == "round_started":
            last_round = int(e["round"])
        elif kind == "model_delta":
            key = (int(e["round"]), str(e["role"]))
            if ended or key[0] < last_round or key in replied:
                continue
            if (*key, str(e["attempt"])) not in begun:
                begun.add((*key, str(e["attempt"])))
                text[key] = ("", "")
            reasoning, content = text.get(key, ("", ""))
            text[key] = (reasoning + _text(e)[0], content + _text(e)[1])
        elif kind == "model_reply":
            key = (int(e["round"]), str(e["role"]))
            replied.add(key)
            shown[key] = text.get(key, ("", ""))
    return shown


def raw_events(redis: Redis, job_id: str, prefix: str = "tandem") -> list[Event]:
    """The job's stream as stored (``tandem:{<id>}:events``), read with ``XRANGE``: no tandem code."""
    out = []
    for entry_id, fields in redis.xrange(f"{prefix}:{{{job_id}}}:events"):
        data = json.loads(fields[b"data"])
        out.append({**data, "id": entry_id.decode(), "type": fields[b"type"].decode()})
    return out


def normalize(event: Any) -> Event:
    """A typed event (``JobEvent``, ``tandem.Client``'s ``Event``) as ``{"id", "type", fields...}``."""
    data = event.model_dump(mode="json")
    data.pop("at", None)
    return data


def until_final(events: list[Event]) -> list[Event]:
    """``events`` up to the ``final`` that ends its last run (what a reader that stops there sees)."""
    last = max((i for i, e in enumerate(events) if e["type"] == "final"), default=len(events) - 1)
    return events[: last + 1]


class Reader(threading.Thread):
    """Collects one reader's events in a thread, live; ``error`` holds what it raised."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.events: list[Event] = []
        self.error: BaseException | None = None

    def collect(self) -> None:
        raise NotImplementedError

    def run(self) -> None:
        try:
            self.collect()
        except BaseException as exc:  # reported by the test, with the reader's name
            self.error = exc

    def result(self, timeout: float) -> list[Event]:
        """The events, once the reader ended by itself (after ``final``)."""
        self.join(timeout)
        assert not self.is_alive(), (
            f"{self.name} had not ended {timeout:g} s after the job: {self.events[-3:]}"
        )
        assert self.error is None, f"{self.name} raised {self.error!r}"
        return self.events


class HandleReader(Reader):
    """``JobHandle.events(after=...)``, the reader of ``tandem.submit``'s handle."""

    def __init__(self, handle: Any, after: str = "0", limit: float = 600) -> None:
        super().__init__(f"JobHandle.events({handle.id})")
        self.handle, self.after, self.limit = handle, after, limit

    def collect(self) -> None:
        for event in self.handle.events(after=self.after, timeout=self.limit):
            self.events.append(normalize(event))


class AsyncHandleReader(Reader):
    """``JobHandle.aevents()`` in an event loop of its own."""

    def __init__(self, handle: Any, limit: float = 600) -> None:
        super().__init__(f"JobHandle.aevents({handle.id})")
        self.handle, self.limit = handle, limit

    def collect(self) -> None:
        async def follow() -> None:
            async for event in self.handle.aevents():
                self.events.append(normalize(event))

        asyncio.run(asyncio.wait_for(follow(), self.limit))


class ClientReader(Reader):
    """``tandem.Client(url).events(job_id)``."""

    def __init__(self, url: str, job_id: str) -> None:
        super().__init__(f"Client.events({job_id})")
        self.url, self.job_id = url, job_id

    def collect(self) -> None:
        from tandem import Client

        with Client(self.url) as api:
            for event in api.events(self.job_id):
                self.events.append(normalize(event))


class SseReader(Reader):
    """``GET /v1/jobs/{id}/events`` of ``tandem api``, parsed as a browser would; with ``drop_after``
    the link is dropped after that many events and opened again with ``Last-Event-ID``."""

    def __init__(self, url: str, job_id: str, *, after: str = "", drop_after: int | None = None) -> None:
        super().__init__(f"SSE({job_id})")
        self.url, self.job_id, self.after, self.drop_after = url, job_id, after, drop_after
        self.connections = 0
        self.problems: list[str] = []
        """Frames whose ``id:`` or ``event:`` line does not match their data."""

    def collect(self) -> None:
        last = self.after
        while True:
            self.connections += 1
            headers = {"Last-Event-ID": last} if last else {}
            dropped = False
            with httpx.stream(
                "GET",
                f"{self.url}/v1/jobs/{self.job_id}/events",
                headers=headers,
                timeout=httpx.Timeout(10, read=120),
            ) as response:
                response.raise_for_status()
                frame: dict[str, str] = {}
                for line in response.iter_lines():
                    if line.startswith(":"):
                        continue
                    if line:
                        name, _, value = line.partition(":")
                        value = value[1:] if value.startswith(" ") else value
                        frame[name] = frame[name] + "\n" + value if name in frame else value
                        continue
                    if "data" in frame:
                        event = json.loads(frame["data"])
                        event.pop("at", None)
                        if (frame.get("id"), frame.get("event")) != (event["id"], event["type"]):
                            self.problems.append(f"frame id/event {frame} do not match its data")
                        self.events.append(event)
                        last = event["id"]
                    frame = {}
                    if self.drop_after is not None and len(self.events) == self.drop_after and not dropped:
                        dropped = True
                        break
            if not dropped:
                return
            self.drop_after = None


class ApiServer:
    """``tandem api`` as a child process on a free loopback port (no tokens); stopped by its pid."""

    def __init__(self, env: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = Path(tempfile.mkdtemp(prefix="tandem-api-")) / "api.log"
        cmd = [sys.executable, "-m", "tandem.workers.cli", "api", "--port", str(self.port)]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(cmd, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tandem api exited: {self.log.read_text()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"tandem api did not answer in 90 s: {self.log.read_text()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
