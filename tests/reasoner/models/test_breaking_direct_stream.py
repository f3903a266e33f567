"""Attacks on "A streamed call goes the same way" (docs/model-hosts.md, "How calls are sent").

The doc promises that a streamed call to an OpenAI-compatible host, on a loop that allows direct
calls, gives the same reply, the same deltas, the same errors and the same retries as LiteLLM's
stream does (the path of any loop that does not allow direct calls), and that a stream cut after
tokens were shown is not retried while one cut before any is. Each test runs one scripted host
twice, once through LiteLLM and once straight, and compares, on the hosts a real deployment
meets: a 429 with ``Retry-After`` before the stream starts, reasoning then content, tool calls
cut in many pieces, 5,000 one-character chunks, a stream with no ``data: [DONE]``, ``event:`` and
comment lines, CRLF line endings, and an error object sent in the middle of the stream.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tandem.reasoner.errors import ModelCallError, TransientModelError
from tandem.reasoner.messages import ModelMessage
from tests.openai_server import OpenAIServer, RecordedRequest, Reply, Script
from tests.reasoner.models.test_direct_http import MODEL, TOOLS, USER, litellm_calls, make, run_allowed

__all__ = ["litellm_calls"]  # the fixture, shared


@dataclass
class Outcome:
    """What one streamed call gave: the reply or the error, the deltas, the sleeps, the requests."""

    reply: ModelMessage | None = None
    error: BaseException | None = None
    deltas: list[tuple[str, str]] = field(default_factory=list)
    asleeps: list[float] = field(default_factory=list)
    requests: list[RecordedRequest] = field(default_factory=list)


def _call(
    script: Callable[[], Script],
    *,
    direct: bool,
    stream: bool = True,
    tools: bool = False,
    service: dict[str, Any] | None = None,
) -> Outcome:
    """One call of a fresh service against a fresh host running ``script()``: through LiteLLM
    (a loop that does not allow direct calls) or straight to the host (one that does)."""
    outcome = Outcome()
    with OpenAIServer(script(), chunk_size=3) as server:
        model, asleeps = make(server.url, stream=stream, **(service or {}))

        def generate() -> Any:
            return model.agenerate(
                "sys",
                USER,
                tools=TOOLS if tools else None,
                on_delta=lambda r, c: outcome.deltas.append((r, c)),
            )

        try:
            outcome.reply = run_allowed(generate) if direct else asyncio.run(generate())
        except ModelCallError as exc:
            outcome.error = exc
        outcome.asleeps = list(asleeps)
        outcome.requests = server.requests
    return outcome


def _both(script: Callable[[], Script], litellm_calls: list[str], **kwargs: Any) -> tuple[Outcome, Outcome]:
    """The LiteLLM outcome, then the direct one; checks which path each call took."""
    through = _call(script, direct=False, **kwargs)
    sent = [MODEL] * len(through.requests)  # one LiteLLM call per attempt
    assert litellm_calls == sent, "the loop that does not allow direct calls went through LiteLLM"
    straight = _call(script, direct=True, **kwargs)
    assert litellm_calls == sent, "the allowed loop skipped LiteLLM"
    return through, straight


def _chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-raw",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "test-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}],
    }


RAW_PIECES = ["The ", "answer ", "is ", "4."]
RAW_USAGE = {"prompt_tokens": 7, "completion_tokens": 4, "total_tokens": 11}


def _raw_chunks(pieces: list[str] = RAW_PIECES) -> list[dict[str, Any]]:
    chunks = [_chunk({"role": "assistant", "content": ""})]
    chunks += [_chunk({"content": piece}) for piece in pieces]
    chunks.append(_chunk({}, "stop"))
    last = _chunk({})
    last["choices"], last["usage"] = [], RAW_USAGE
    return [*chunks, last]


def _event_stream(lines: list[str], newline: str = "\n") -> Reply:
    """A 200 ``text/event-stream`` answer of exactly these lines (each event ends with a blank line)."""
    return Reply(body=newline.join(lines) + newline, content_type="text/event-stream")


def _data(chunks: list[dict[str, Any]]) -> list[str]:
    lines: list[str] = []
    for chunk in chunks:
        lines += [f"data: {json.dumps(chunk)}", ""]
    return lines


def _same(through: Outcome, straight: Outcome) -> None:
    assert through.error is None, repr(through.error)
    assert straight.error is None, repr(straight.error)
    assert through.reply is not None and straight.reply is not None
    assert straight.reply.model_dump() == through.reply.model_dump()
    assert straight.deltas == through.deltas
    assert len(straight.asleeps) == len(through.asleeps)  # the same retries (their waits are jittered)
    assert len(straight.requests) == len(through.requests)


# -- errors and retries before the stream starts ----------------------------------------------


def test_a_429_with_retry_after_before_the_stream_starts_is_retried_after_it(
    litellm_calls: list[str],
) -> None:
    through, straight = _both(
        lambda: [Reply(status=429, headers={"Retry-After": "3"}), Reply("The answer is 4.")], litellm_calls
    )
    _same(through, straight)
    assert straight.asleeps == [3.0]
    assert straight.reply is not None and straight.reply.content == "The answer is 4."
    assert [r["stream"] for r in straight.requests] == [True, True]
    assert "".join(c for _, c in straight.deltas) == "The answer is 4."  # the 429 showed nothing


def test_a_429_with_retry_after_past_the_hold_is_handed_to_the_caller(litellm_calls: list[str]) -> None:
    through, straight = _both(
        lambda: [Reply(status=429, headers={"Retry-After": "10"}), Reply("4")],
        litellm_calls,
        service={"retry_hold": 5.0},
    )
    for outcome in (through, straight):
        assert isinstance(outcome.error, TransientModelError), repr(outcome.error)
        assert (outcome.error.status_code, outcome.error.retry_after) == (429, 10.0)
        assert outcome.asleeps == [] and len(outcome.requests) == 1 and outcome.deltas == []


# -- what a stream carries --------------------------------------------------------------------


@pytest.mark.parametrize(
    "reasoning_field",
    ["reasoning_content", "reasoning"],  # ``reasoning``: newer vLLM's name for the field
)
def test_reasoning_then_content_reads_as_litellm_reads_it(
    reasoning_field: str, litellm_calls: list[str]
) -> None:
    reply = Reply(
        "The answer is 4.",
        reasoning_content="First add two and two. " * 20,
        reasoning_field=reasoning_field,
        chunk_size=2,
    )
    through, straight = _both(lambda: reply, litellm_calls)
    plain = _call(lambda: reply, direct=True, stream=False)
    assert plain.reply is not None and plain.reply.reasoning == "First add two and two. " * 20
    _same(through, straight)
    assert straight.reply is not None
    assert straight.reply.reasoning == "First add two and two. " * 20
    assert straight.reply.content == "The answer is 4."
    shown = [r for r, _ in straight.deltas if r]
    assert "".join(shown) == straight.reply.reasoning
    first_content = next(i for i, (_, c) in enumerate(straight.deltas) if c)
    assert all(not r for r, _ in straight.deltas[first_content:])  # reasoning first, then content


def test_tool_calls_cut_into_one_character_chunks_are_joined_whole(litellm_calls: list[str]) -> None:
    calls = [
        {"id": "call_a", "name": "add", "arguments": json.dumps({"a": 12345, "b": 67890})},
        {"id": "call_b", "name": "add", "arguments": json.dumps({"a": -1, "b": 1})},
    ]
    reply = Reply("Calling twice.", tool_calls=calls, chunk_size=1)
    through, straight = _both(lambda: reply, litellm_calls, tools=True)
    _same(through, straight)
    assert straight.reply is not None
    got = [(c.id, c.name, json.loads(c.arguments)) for c in straight.reply.tool_calls]
    assert got == [("call_a", "add", {"a": 12345, "b": 67890}), ("call_b", "add", {"a": -1, "b": 1})]
    plain = _call(lambda: Reply("Calling twice.", tool_calls=calls), direct=True, stream=False, tools=True)
    assert plain.reply is not None and straight.reply.model_dump() == plain.reply.model_dump()


def test_five_thousand_one_character_chunks_give_the_non_streamed_reply(litellm_calls: list[str]) -> None:
    text = "".join(" " if i % 7 == 6 else chr(ord("a") + i % 26) for i in range(5000))
    assert len(text) == 5000
    streamed = _call(lambda: Reply(text, chunk_size=1), direct=True)
    plain = _call(lambda: Reply(text), direct=True, stream=False)
    assert litellm_calls == []
    assert streamed.error is None and plain.error is None
    assert streamed.reply is not None and plain.reply is not None
    assert streamed.reply.model_dump() == plain.reply.model_dump()
    assert streamed.reply.content == text
    assert [c for _, c in streamed.deltas] == list(text)  # each piece as it was written, in order
    assert len(streamed.requests) == 1


# -- event-stream framing ---------------------------------------------------------------------


def test_a_stream_closed_cleanly_without_done_gives_the_reply(litellm_calls: list[str]) -> None:
    through, straight = _both(lambda: _event_stream(_data(_raw_chunks())), litellm_calls)
    _same(through, straight)
    assert straight.reply is not None and straight.reply.content == "The answer is 4."
    assert len(straight.requests) == 1


def test_event_and_comment_lines_are_skipped(litellm_calls: list[str]) -> None:
    lines = [": keep-alive", "", "event: message", "retry: 1000", "id: 1"]
    for n, chunk in enumerate(_raw_chunks()):
        data = f"data:{json.dumps(chunk)}" if n % 2 else f"data: {json.dumps(chunk)}"  # the space is optional
        lines += [": ping", data, ""]
    lines += ["data: [DONE]", ""]
    through, straight = _both(lambda: _event_stream(lines), litellm_calls)
    _same(through, straight)
    assert straight.reply is not None and straight.reply.content == "The answer is 4."
    assert [c for _, c in straight.deltas if c] == RAW_PIECES


def test_crlf_line_endings_read_as_lf(litellm_calls: list[str]) -> None:
    lines = [*_data(_raw_chunks()), "data: [DONE]", ""]
    through, straight = _both(lambda: _event_stream(lines, newline="\r\n"), litellm_calls)
    _same(through, straight)
    assert straight.reply is not None and straight.reply.content == "The answer is 4."
    assert [c for _, c in straight.deltas if c] == RAW_PIECES
    lf = _call(lambda: _event_stream([*_data(_raw_chunks()), "data: [DONE]", ""]), direct=True)
    assert lf.reply is not None and straight.reply.model_dump() == lf.reply.model_dump()


def _error_stream(shown: int) -> Reply:
    """The raw stream with an error object after ``shown`` pieces of text, then the rest."""
    error = {"error": {"message": "The engine overloaded mid-answer", "type": "server_error", "code": "503"}}
    chunks = _raw_chunks()
    head, tail = chunks[: 1 + shown], chunks[1 + shown :]
    return _event_stream([*_data(head), f"data: {json.dumps(error)}", "", *_data(tail), "data: [DONE]", ""])


def test_an_error_object_mid_stream_after_text_fails_the_call_unretried(litellm_calls: list[str]) -> None:
    through, straight = _both(lambda: [_error_stream(2), Reply("4")], litellm_calls)
    assert through.error is not None, f"LiteLLM took it as a reply: {through.reply!r}"
    assert straight.error is not None, f"the direct stream took it as a reply: {straight.reply!r}"
    assert type(straight.error) is type(through.error)
    assert "The engine overloaded mid-answer" in str(straight.error)
    assert len(straight.requests) == len(through.requests) == 1  # text was shown: not retried
    assert straight.asleeps == through.asleeps == []
    assert [c for _, c in straight.deltas if c] == RAW_PIECES[:2]


def test_an_error_object_before_any_text_is_retried_as_through_litellm(litellm_calls: list[str]) -> None:
    through, straight = _both(lambda: [_error_stream(0), Reply("4")], litellm_calls)
    for outcome in (through, straight):
        assert outcome.error is None, repr(outcome.error)
        assert outcome.reply is not None and outcome.reply.content == "4"
        assert len(outcome.requests) == 2 and len(outcome.asleeps) == 1  # a 5xx: retried once
        assert [c for _, c in outcome.deltas if c] == ["4"]
    assert straight.reply is not None and through.reply is not None
    assert straight.reply.model_dump() == through.reply.model_dump()


# -- event lines cut across network reads ------------------------------------------------------


class SplitStream:
    """A host that streams ``body`` cut into ``size``-byte HTTP chunks, a pause between each, so
    an event line (and a UTF-8 character) reaches the client across several reads."""

    def __init__(self, body: bytes, size: int) -> None:
        self.body, self.size, self.requests = body, size, 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.requests += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i in range(0, len(outer.body), outer.size):
                    piece = outer.body[i : i + outer.size]
                    self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                    self.wfile.flush()
                    time.sleep(0.002)
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> SplitStream:
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _split_call(body: bytes, size: int, *, direct: bool) -> Outcome:
    outcome = Outcome()
    with SplitStream(body, size) as host:
        model, asleeps = make(host.url, stream=True)

        def generate() -> Any:
            return model.agenerate("sys", USER, on_delta=lambda r, c: outcome.deltas.append((r, c)))

        try:
            outcome.reply = run_allowed(generate) if direct else asyncio.run(generate())
        except ModelCallError as exc:
            outcome.error = exc
        outcome.asleeps = list(asleeps)
        assert host.requests == 1
    return outcome


@pytest.mark.parametrize("size", [1, 5, 64])
def test_event_lines_and_utf8_characters_cut_across_reads_are_joined(
    size: int, litellm_calls: list[str]
) -> None:
    pieces = ["Größe ", "日本語の", "答え ", "🙂 is ", "4."]
    body = "\n".join([*_data(_raw_chunks(pieces)), "data: [DONE]", ""]).encode()
    through = _split_call(body, size, direct=False)
    assert litellm_calls == [MODEL]
    straight = _split_call(body, size, direct=True)
    assert litellm_calls == [MODEL]
    _same(through, straight)
    assert straight.reply is not None and straight.reply.content == "".join(pieces)
    assert [c for _, c in straight.deltas if c] == pieces


# -- what hosts really send -------------------------------------------------------------------


def _usage_every_chunk() -> Reply:
    """vLLM with ``continuous_usage_stats``: a growing usage in every chunk, then the total."""
    chunks = _raw_chunks()
    for n, chunk in enumerate(chunks[:-1]):
        chunk["usage"] = {"prompt_tokens": 7, "completion_tokens": n, "total_tokens": 7 + n}
    return _event_stream([*_data(chunks), "data: [DONE]", ""])


def _null_content_with_tools() -> Reply:
    """Deltas with ``"content": null`` around a tool call sent in pieces, no id after the first."""
    head = _chunk({"role": "assistant", "content": None})
    call = {"index": 0, "id": "call_x", "type": "function", "function": {"name": "add", "arguments": ""}}
    parts = ['{"a"', ": 2, ", '"b": 2}']
    chunks = [head, _chunk({"content": None, "tool_calls": [call]})]
    chunks += [
        _chunk({"content": None, "tool_calls": [{"index": 0, "function": {"arguments": p}}]}) for p in parts
    ]
    chunks.append(_chunk({}, "tool_calls"))
    return _event_stream([*_data(chunks), "data: [DONE]", ""])


def _cut_by_length() -> Reply:
    chunks = _raw_chunks()
    chunks[-2] = _chunk({}, "length")
    return _event_stream([*_data(chunks), "data: [DONE]", ""])


def _whole_json_answer() -> Reply:
    """A host that ignores ``stream`` and answers one ``chat.completion``."""
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "test-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "4"}, "finish_reason": "stop"}],
        "usage": RAW_USAGE,
    }
    return Reply(body=json.dumps(body), content_type="application/json")


def _interleaved_tool_calls() -> Reply:
    """Two calls whose pieces come interleaved by ``index`` (parallel calls, as some hosts send)."""

    def call(index: int, **fields: Any) -> dict[str, Any]:
        return _chunk({"tool_calls": [{"index": index, **fields}]})

    chunks = [
        _chunk({"role": "assistant", "content": ""}),
        call(0, id="call_0", type="function", function={"name": "add", "arguments": '{"a": '}),
        call(1, id="call_1", type="function", function={"name": "add", "arguments": '{"a": 10'}),
        call(0, function={"arguments": '1, "b": 2}'}),
        call(1, function={"arguments": ', "b": 20}'}),
        _chunk({}, "tool_calls"),
    ]
    return _event_stream([*_data(chunks), "data: [DONE]", ""])


@pytest.mark.parametrize(
    "make_reply",
    [
        pytest.param(_interleaved_tool_calls, id="interleaved-tool-calls"),
        pytest.param(lambda: _event_stream(["data: [DONE]", ""]), id="done-and-nothing-else"),
        pytest.param(lambda: _event_stream([": just a comment", ""]), id="no-chunk-at-all"),
        pytest.param(_usage_every_chunk, id="usage-in-every-chunk"),
        pytest.param(_null_content_with_tools, id="null-content-tool-pieces"),
        pytest.param(_cut_by_length, id="finish-length"),
        pytest.param(_whole_json_answer, id="json-not-a-stream"),
    ],
)
def test_what_real_hosts_stream_reads_as_through_litellm(make_reply: Any, litellm_calls: list[str]) -> None:
    through, straight = _both(lambda: [make_reply(), Reply("fallback")], litellm_calls, tools=True)
    if through.error is not None:
        assert straight.error is not None, (
            f"LiteLLM failed ({through.error!r}), direct gave {straight.reply!r}"
        )
        assert type(straight.error) is type(through.error)
        assert len(straight.requests) == len(through.requests)
    else:
        _same(through, straight)  # a retry, when LiteLLM retries, included


# -- what counts as "tokens shown" for a cut stream --------------------------------------------


@pytest.mark.parametrize(
    ("cut", "retried"),
    [
        pytest.param(Reply("four", break_after=1), True, id="after-the-role-chunk-only"),
        pytest.param(
            Reply("four", reasoning_content="thinking hard", break_after=3), False, id="after-reasoning"
        ),
    ],
)
def test_a_cut_stream_is_retried_only_before_anything_was_shown(
    cut: Reply, retried: bool, litellm_calls: list[str]
) -> None:
    straight = _call(lambda: [cut, Reply("4")], direct=True)
    assert litellm_calls == []
    shown = [d for d in straight.deltas if d[0] or d[1]]
    if retried:
        assert straight.error is None and straight.reply is not None, repr(straight.error)
        assert straight.reply.content == "4" and len(straight.requests) == 2
        assert shown == [("", "4")]
    else:
        assert isinstance(straight.error, TransientModelError), repr(straight.error)
        assert len(straight.requests) == 1 and straight.asleeps == []
        assert shown and all(r and not c for r, c in shown)  # only reasoning reached the listener


def test_interleaved_tool_call_pieces_join_by_index(litellm_calls: list[str]) -> None:
    straight = _call(_interleaved_tool_calls, direct=True, tools=True)
    assert litellm_calls == [] and straight.error is None and straight.reply is not None
    got = [(c.id, c.name, json.loads(c.arguments)) for c in straight.reply.tool_calls]
    assert got == [("call_0", "add", {"a": 1, "b": 2}), ("call_1", "add", {"a": 10, "b": 20})]


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param(
            lambda: {"Retry-After": email.utils.formatdate(time.time() + 3, usegmt=True)}, id="http-date"
        ),
        pytest.param(lambda: {"retry-after-ms": "2500"}, id="retry-after-ms"),
    ],
)
def test_a_429_with_other_retry_after_forms_waits_as_through_litellm(
    headers: Any, litellm_calls: list[str]
) -> None:
    through, straight = _both(lambda: [Reply(status=429, headers=headers()), Reply("4")], litellm_calls)
    _same(through, straight)
    assert len(straight.asleeps) == 1
    assert abs(straight.asleeps[0] - through.asleeps[0]) < 1.5, (through.asleeps, straight.asleeps)
