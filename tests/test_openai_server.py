"""The scripted OpenAI-compatible test server itself: wire format, scripting, concurrency, CLI."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.openai_server import OpenAIServer, RecordedRequest, Reply, load_script_file

ROOT = Path(__file__).resolve().parents[1]
CHAT = {"model": "whatever/any-name", "messages": [{"role": "user", "content": "two plus two"}]}


def post(server_url: str, body: dict, **kwargs: object) -> httpx.Response:
    return httpx.post(f"{server_url}/chat/completions", json=body, timeout=10, **kwargs)  # type: ignore[arg-type]


def sse_events(response: httpx.Response) -> list[str]:
    return [line[len("data: ") :] for line in response.text.splitlines() if line.startswith("data: ")]


def test_plain_completion_echoes_the_model_and_counts_usage() -> None:
    with OpenAIServer(Reply("four", reasoning_content="add")) as server:
        body = post(server.url, CHAT).json()
        assert server.url.startswith("http://127.0.0.1:") and server.url.endswith("/v1")
    assert body["object"] == "chat.completion" and body["model"] == "whatever/any-name"
    message = body["choices"][0]["message"]
    assert (message["content"], message["reasoning_content"]) == ("four", "add")
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def test_stream_is_sse_ending_with_done_and_usage_on_request() -> None:
    reply = Reply("abcdefgh", tool_calls=[{"name": "f", "arguments": {"x": 1}}], usage={"prompt_tokens": 2})
    with OpenAIServer(reply, chunk_size=3) as server:
        response = post(server.url, {**CHAT, "stream": True, "stream_options": {"include_usage": True}})
        no_usage = post(server.url, {**CHAT, "stream": True})
    assert response.headers["content-type"] == "text/event-stream"
    events = sse_events(response)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert content == "abcdefgh"
    calls = [d for c in chunks if c["choices"] for d in c["choices"][0]["delta"].get("tool_calls", [])]
    assert calls[0]["function"]["name"] == "f" and calls[0]["type"] == "function"
    assert "".join(d["function"]["arguments"] for d in calls) == '{"x": 1}'
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 2
    assert not any("usage" in json.loads(e) for e in sse_events(no_usage)[:-1])


def test_error_status_has_openai_error_body_and_headers() -> None:
    with OpenAIServer(Reply(status=429, headers={"Retry-After": "2"})) as server:
        response = post(server.url, CHAT)
    assert response.status_code == 429 and response.headers["retry-after"] == "2"
    assert response.json()["error"]["type"] == "rate_limit_error"


def test_reply_list_repeats_the_last_by_default() -> None:
    with OpenAIServer(["one", "two"]) as server:
        got = [post(server.url, CHAT).json()["choices"][0]["message"]["content"] for _ in range(3)]
        assert [r.number for r in server.requests] == [1, 2, 3]
    assert got == ["one", "two", "two"]


def test_exhausted_script_can_be_an_error() -> None:
    with OpenAIServer(["one"], when_exhausted="error") as server:
        post(server.url, CHAT)
        response = post(server.url, CHAT)
    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith("test server script exhausted")


def test_callable_script_sees_the_recorded_request() -> None:
    def echo(request: RecordedRequest) -> str:
        return f"#{request.number}: {request['messages'][-1]['content']}"

    with OpenAIServer(echo) as server:
        body = post(server.url, CHAT).json()
    assert body["choices"][0]["message"]["content"] == "#1: two plus two"


def test_delay_does_not_block_other_requests() -> None:
    """Four requests whose replies wait 600 s are in the server at once: each delay waits in its
    request's own thread (a server that waited in one would hold the other three for 600 s).
    Checked by the server's count of requests in flight, not by a clock; stopping the server cuts
    the delays short."""

    def ask() -> None:
        with contextlib.suppress(httpx.HTTPError):  # the stop closes the connections unanswered
            post(server.url, CHAT)

    with OpenAIServer(Reply("slow", delay=600)) as server:
        threads = [threading.Thread(target=ask) for _ in range(4)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 120
        while server.in_flight < 4:
            assert time.monotonic() < deadline, f"{server.in_flight} of 4 requests in the server at once"
            time.sleep(0.01)
        assert server.request_count == 4
    for thread in threads:
        thread.join(30)


def test_stop_is_prompt_even_with_a_pending_delay() -> None:
    server = OpenAIServer(Reply("never", delay=30)).start()
    outcome: list[object] = []

    def call() -> None:
        try:
            outcome.append(post(server.url, CHAT))
        except httpx.HTTPError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    while server.request_count == 0:
        time.sleep(0.01)
    started = time.monotonic()
    server.stop()
    thread.join(5)
    assert time.monotonic() - started < 3
    assert len(outcome) == 1 and isinstance(outcome[0], httpx.HTTPError)


def test_models_route_and_api_key_check() -> None:
    with OpenAIServer("ok", models=["a", "b"], api_key="secret") as server:
        models = httpx.get(f"{server.url}/models", timeout=5).json()
        refused = post(server.url, CHAT)
        accepted = post(server.url, CHAT, headers={"Authorization": "Bearer secret"})
    assert [m["id"] for m in models["data"]] == ["a", "b"]
    assert refused.status_code == 401 and accepted.status_code == 200


def test_script_file_by_prompt(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(
        json.dumps({"by_prompt": [{"match": "plus", "reply": {"content": "4"}}], "default": "no idea"})
    )
    script = load_script_file(path)
    with OpenAIServer(script) as server:
        hit = post(server.url, CHAT).json()["choices"][0]["message"]["content"]
        miss = post(server.url, {**CHAT, "messages": [{"role": "user", "content": "hello"}]}).json()
    assert (hit, miss["choices"][0]["message"]["content"]) == ("4", "no idea")


def test_script_file_rejects_unknown_fields(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([{"contnet": "typo"}]))
    with pytest.raises(ValueError, match="contnet"):
        load_script_file(path)


def test_standalone_process() -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.openai_server",
            "--port",
            "0",
            "--latency",
            "0.1",
            "--reply",
            "hi there",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        assert line.startswith("listening on http://127.0.0.1:"), line
        url = line.removeprefix("listening on ")
        started = time.monotonic()
        body = post(url, CHAT).json()
        assert time.monotonic() - started >= 0.1
        assert body["choices"][0]["message"]["content"] == "hi there"
    finally:
        process.terminate()
        process.wait(10)
    assert process.returncode == 0


def test_above_its_capacity_the_server_answers_429_with_retry_after() -> None:
    release = threading.Event()

    def held(_: object) -> Reply:  # the admitted requests stay in flight until the test says
        release.wait(30)
        return Reply(content="ok")

    with OpenAIServer(held, max_concurrency=2, overload_retry_after=3) as server:

        def call(_: int) -> httpx.Response:
            return httpx.post(f"{server.url}/chat/completions", json={"messages": []}, timeout=30)

        with concurrent.futures.ThreadPoolExecutor(5) as pool:
            first = [pool.submit(call, i) for i in range(2)]
            deadline = time.monotonic() + 30
            while server.in_flight < 2:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            over = list(pool.map(call, range(3)))  # answered at once: the host is full
            release.set()
            answers = [f.result() for f in first] + over
        assert sorted(a.status_code for a in answers) == [200, 200, 429, 429, 429]
        assert all(a.headers["retry-after"] == "3" for a in answers if a.status_code == 429)
        # A request leaves the count once its handler returns, just after the client has its
        # answer: on a loaded machine the last one may not have left yet.
        deadline = time.monotonic() + 10
        while server.in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.in_flight_max == 2 and server.rejected == 3 and server.in_flight == 0


def test_a_storm_refuses_everything_for_a_while() -> None:

    with OpenAIServer("ok") as server:
        server.storm(3.0, retry_after=20)  # long enough that a loaded machine sends one inside it
        ends = time.monotonic() + 3.0
        first = httpx.post(f"{server.url}/chat/completions", json={"messages": []})
        time.sleep(max(0.0, ends - time.monotonic()) + 0.1)
        after = httpx.post(f"{server.url}/chat/completions", json={"messages": []})
    assert (first.status_code, first.headers["retry-after"], after.status_code) == (429, "20", 200)
    assert server.rejected == 1


def test_a_storm_can_start_with_the_next_request() -> None:
    with OpenAIServer("ok") as server:
        # Long enough that a loaded machine sends both requests inside it.
        server.storm(2.0, retry_after=5, from_next_request=True)
        time.sleep(2.1)  # the storm has not begun: no request came yet
        first = httpx.post(f"{server.url}/chat/completions", json={"messages": []})
        second = httpx.post(f"{server.url}/chat/completions", json={"messages": []})
        time.sleep(2.1)
        after = httpx.post(f"{server.url}/chat/completions", json={"messages": []})
    assert [r.status_code for r in (first, second, after)] == [429, 429, 200]
