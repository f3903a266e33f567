"""Two stub OpenAI-compatible model hosts (the Thinker's and the Actor's) for ``bench.outside``.

``python -m bench.outside_hosts --latency S --ready-file PATH`` serves ``POST /v1/chat/completions``
on two free loopback ports (one aiohttp app each, in one asyncio loop, so hundreds of calls wait
at once without a thread each), answers every call after ``S`` seconds, whole or as an SSE stream
when the request asks ``"stream": true``, and writes ``{"thinker": port, "actor": port}`` to the
ready file once both listen. ``GET /stats`` on either port returns what that host answered:
``requests`` (count), ``tool_ok`` (Thinker requests that read a succeeded ``word_count``
result) and ``first`` (job index -> unix time of that job's first request).

The replies script a dual job of exactly two rounds, in the prompt-mode format tandem documents
(docs/in-process.md, "How a dual round works" and "Function calls"):

- round 1, Thinker: an ``<instruction>`` to call ``word_count`` (a tool of the default toolkit);
- round 1, Actor: one ``<function_call>`` of ``word_count``;
- round 2, Thinker (its messages now hold a ``<function_call_result>``): ``TASK_DONE``;
- round 2, Actor (told ``TASK_DONE``): a ``<deliverable>``.

The job's index is read from its goal (``outside job <n>: ...``) to date its first Thinker request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import socket
import time
import uuid
from pathlib import Path
from typing import Any

from aiohttp import web

GOAL_INDEX = re.compile(r"outside job (\d+):")  # warm-up jobs ("outside warm-up <n>:") are not dated
TEXT = "tandem runs reasoning jobs on celery workers"
TOOL_OK = re.compile(r"call \d+: word_count\(.*?status: succeeded")


def thinker_reply(messages: list[dict[str, Any]]) -> str:
    """The Thinker's reply: instruct the tool call in round 1, ``TASK_DONE`` once a result came."""
    # Not the system prompt: it names <function_call_result> blocks in its guide.
    seen = "\n".join(str(m.get("content") or "") for m in messages if m.get("role") != "system")
    if "<function_call_result>" in seen:
        return (
            "<deep_thinking>The count is known.</deep_thinking>\n"
            "<instruction>TASK_DONE. Write the deliverable with the word count.</instruction>\n"
            '<input>{"facts": ["counted"]}</input>'
        )
    call = {"tool": "word_count", "args": {"text": TEXT}}
    return (
        "<deep_thinking>The Actor must count the words.</deep_thinking>\n"
        "<instruction>Call word_count with the input below and report its output.</instruction>\n"
        f"<input>{json.dumps(call)}</input>"
    )


def actor_reply(messages: list[dict[str, Any]]) -> str:
    """The Actor's reply: one ``word_count`` call, or the deliverable once told ``TASK_DONE``."""
    last = str(messages[-1].get("content") or "") if messages else ""
    if "TASK_DONE" in last:
        return (
            "<shallow_thinking>Done.</shallow_thinking>\n<deliverable>\nThe text has 7 words.\n</deliverable>"
        )
    call = {"name": "word_count", "call_objective": "count the words", "args": {"text": TEXT}}
    return (
        "<shallow_thinking>I will call word_count.</shallow_thinking>\n"
        f"<action>\n<function_call>\n{json.dumps(call)}\n</function_call>\n</action>"
    )


class Host:
    """One stub host: its role's script, its latency, and what it answered."""

    def __init__(self, role: str, latency: float) -> None:
        self.role = role
        self.latency = latency
        self.requests = 0
        self.first: dict[int, float] = {}
        self.tool_ok = 0  # Thinker requests that read a succeeded word_count result

    def _job_index(self, messages: list[dict[str, Any]]) -> int | None:
        for message in messages:
            found = GOAL_INDEX.search(str(message.get("content") or ""))
            if found:
                return int(found.group(1))
        return None

    async def completions(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/chat/completions``: the scripted reply after the latency."""
        arrived = time.time()
        body = await request.json()
        messages = body.get("messages") or []
        self.requests += 1
        index = self._job_index(messages)
        if index is not None and index not in self.first:
            self.first[index] = arrived
        text = thinker_reply(messages) if self.role == "thinker" else actor_reply(messages)
        if self.role == "thinker" and TOOL_OK.search(json.dumps(messages[1:])):
            self.tool_ok += 1
        await asyncio.sleep(self.latency)
        model = str(body.get("model") or self.role)
        ident = f"chatcmpl-{uuid.uuid4().hex[:12]}"
        usage = {"prompt_tokens": 100, "completion_tokens": 40, "total_tokens": 140}
        if not body.get("stream"):
            message = {"role": "assistant", "content": text}
            return web.json_response(
                {
                    "id": ident,
                    "object": "chat.completion",
                    "created": int(arrived),
                    "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": usage,
                }
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        pieces = [text[i : i + 40] for i in range(0, len(text), 40)]
        for n, piece in enumerate(pieces):
            last = n == len(pieces) - 1
            chunk: dict[str, Any] = {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": int(arrived),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": piece} if n == 0 else {"content": piece},
                        "finish_reason": "stop" if last else None,
                    }
                ],
            }
            if last:
                chunk["usage"] = usage
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def stats(self, request: web.Request) -> web.Response:
        """``GET /stats``: requests answered and each job's first request time."""
        return web.json_response({"requests": self.requests, "first": self.first, "tool_ok": self.tool_ok})

    def app(self) -> web.Application:
        """The aiohttp application of this host."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self.completions)
        app.router.add_get("/stats", self.stats)
        return app


async def serve(latency: float, ready_file: Path) -> None:
    """Serve both hosts on free loopback ports until cancelled; write the ports to ``ready_file``."""
    ports: dict[str, int] = {}
    runners = []
    for role in ("thinker", "actor"):
        runner = web.AppRunner(Host(role, latency).app(), access_log=None)
        await runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        ports[role] = sock.getsockname()[1]
        await web.SockSite(runner, sock, backlog=4096).start()
        runners.append(runner)
    tmp = ready_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(ports))
    tmp.replace(ready_file)
    try:
        await asyncio.Event().wait()
    finally:
        for runner in runners:
            await runner.cleanup()


def main() -> None:
    """The command line: ``--latency`` seconds per call, ``--ready-file`` for the ports."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=5.0)
    parser.add_argument("--ready-file", type=Path, required=True)
    args = parser.parse_args()
    asyncio.run(serve(args.latency, args.ready_file))


if __name__ == "__main__":
    main()
