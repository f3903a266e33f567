"""``tandem api`` as a real process, real workers, streaming model hosts, a real HTTP client."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.conftest import Cluster, _make_cluster
from tests.integration.plan_model import goal_with_plan
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

TOKEN = "integration-test-token-0123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PLAN = [[{"name": "add", "args": {"a": 2, "b": 3}}], [{"name": "add", "args": {"a": 1, "b": 1}}]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ApiProcess:
    """``tandem api`` started as a child process; stopped by its pid."""

    def __init__(self, env: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = Path(tempfile.mkdtemp(prefix="tandem-api-")) / "api.log"
        cmd = [
            sys.executable,
            "-m",
            "tandem.workers.cli",
            "api",
            "--port",
            str(self.port),
            "--log-level",
            "warning",
        ]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(cmd, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tandem api exited: {self.log.read_text()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"tandem api did not answer in 60 s: {self.log.read_text()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


Setup = tuple[Cluster, OpenAIServer, OpenAIServer, ApiProcess, httpx.Client]


@pytest.fixture(scope="module")
def api(redis_base: str) -> Iterator[Setup]:
    gen = _make_cluster(
        redis_base,
        TANDEM_THINKER_STREAM="true",
        TANDEM_ACTOR_STREAM="true",
        TANDEM_DELTA_INTERVAL_MS="0",  # every streamed chunk its own delta: the order is visible
        TANDEM_API_TOKENS=TOKEN,
        TANDEM_API_MAX_BODY="20000",
    )
    cluster, thinker, actor = next(gen)
    cluster.start("thinker", "actor", "tools")
    server = ApiProcess(cluster.env)
    client = httpx.Client(base_url=server.url, headers=AUTH, timeout=httpx.Timeout(60, read=90))
    try:
        yield cluster, thinker, actor, server, client
    finally:
        client.close()
        server.stop()
        gen.close()


def read_sse(response: httpx.Response, limit: int | None = None) -> list[dict[str, Any]]:
    """The events of an SSE response (at most ``limit``), each as its ``data`` JSON plus ``sse_id``."""
    return sse_events(response.iter_lines(), limit)


def sse_events(lines: Iterator[str], limit: int | None = None) -> list[dict[str, Any]]:
    """The events of SSE ``lines``, read until ``limit`` events or the end."""
    events: list[dict[str, Any]] = []
    fields: dict[str, str] = {}
    for line in lines:
        if line == "":
            if "data" in fields:
                event = json.loads(fields["data"])
                event["sse_id"] = fields.get("id")
                event["sse_event"] = fields.get("event")
                events.append(event)
                if limit is not None and len(events) >= limit:
                    return events
            fields = {}
        elif not line.startswith(":") and ": " in line:
            key, value = line.split(": ", 1)
            fields[key] = value
    return events


def stream(
    client: httpx.Client, job_id: str, last_id: str | None = None, limit: int | None = None
) -> list[dict]:
    headers = {"Last-Event-ID": last_id} if last_id else {}
    with client.stream("GET", f"/v1/jobs/{job_id}/events", headers=headers) as response:
        assert response.status_code == 200, response.read()
        return read_sse(response, limit)


def test_create_read_and_stream_to_the_end(api: Setup) -> None:
    _, _, _, _, client = api
    created = client.post("/v1/jobs", json={"goal": goal_with_plan("add twice", PLAN), "max_rounds": 5})
    assert created.status_code == 202, created.text
    job_id = created.json()["id"]
    assert client.get(f"/v1/jobs/{job_id}").json()["status"]["state"] in ("queued", "running")

    events = stream(client, job_id)  # returns because the server ends the stream after ``final``

    kinds = [e["type"] for e in events]
    assert kinds[0] == "job_started" and kinds[-1] == "final" and kinds.count("final") == 1
    assert {"round_started", "model_delta", "model_reply", "tool_call", "tool_result"} <= set(kinds)
    assert all(e["sse_id"] == e["id"] and e["sse_event"] == e["type"] for e in events)
    final = events[-1]
    assert final["status"] == "completed" and final["deliverable"] == "all planned calls ran"
    body = client.get(f"/v1/jobs/{job_id}").json()
    assert body["status"]["state"] == "completed"
    assert (
        body["result"]["deliverable"] == final["deliverable"] and body["result"]["rounds"] == final["rounds"]
    )
    assert [r for r in (e.get("output") for e in events if e["type"] == "tool_result")] == ["5", "2"]
    assert job_id in [j["job_id"] for j in client.get("/v1/jobs").json()["jobs"]]


def test_the_deltas_of_a_streaming_host_arrive_in_order_and_add_up_to_the_reply(api: Setup) -> None:
    cluster, _, _, _, client = api
    job_id = client.post("/v1/jobs", json={"goal": goal_with_plan("add", PLAN[:1]), "max_rounds": 4}).json()[
        "id"
    ]
    events = stream(client, job_id)

    replies = [e for e in events if e["type"] == "model_reply"]
    assert len(replies) >= 4  # thinker and actor, two rounds
    for reply in replies:
        at = events.index(reply)
        deltas = [
            e
            for e in events[:at]
            if e["type"] == "model_delta" and (e["round"], e["role"]) == (reply["round"], reply["role"])
        ]
        assert len({d["attempt"] for d in deltas}) == 1
        assert [d["seq"] for d in deltas] == list(range(len(deltas)))
        assert "".join(d["content"] for d in deltas) == reply["content"]
        assert "".join(d["reasoning"] for d in deltas) == reply["reasoning"]
        if len(reply["content"]) > 16:  # the host streams 8 characters a chunk: many deltas
            assert len(deltas) > 2
    stored = {(m.round, m.role): m for m in cluster.store.memory(job_id).get_messages()}
    for reply in replies:  # the reply the events carry is the one stored in the job's memory
        message = stored[(reply["round"], reply["role"])]
        assert (message.content, message.reasoning) == (reply["content"], reply["reasoning"])
    thinker_reply = next(r for r in replies if r["role"] == "thinker")
    assert thinker_reply["reasoning"] == "thinker reasoning 1"  # reasoning kept apart from content
    assert "thinker reasoning" not in thinker_reply["content"]


def test_a_stream_resumes_from_last_event_id_without_gaps_or_repeats(api: Setup) -> None:
    _, _, _, _, client = api
    plan = [[{"name": "sleep_tool", "args": {"seconds": 0.3}}]] * 2
    job_id = client.post("/v1/jobs", json={"goal": goal_with_plan("sleepy", plan), "max_rounds": 5}).json()[
        "id"
    ]

    first = stream(client, job_id, limit=5)  # the client drops the connection mid-job
    rest = stream(client, job_id, last_id=first[-1]["id"])
    whole = stream(client, job_id)  # afterwards, from the first event

    assert rest[-1]["type"] == "final"
    assert [e["id"] for e in first + rest] == [e["id"] for e in whole]
    assert len({e["id"] for e in whole}) == len(whole)


def test_cancel_stops_a_running_job(api: Setup) -> None:
    cluster, _, _, _, client = api
    plan = [[{"name": "sleep_tool", "args": {"seconds": 1}}]] * 5
    job_id = client.post(
        "/v1/jobs", json={"goal": goal_with_plan("slow NEVER_DONE", plan), "max_rounds": 20}
    ).json()["id"]
    deadline = time.monotonic() + 60
    while not [c for c in cluster.tool_calls() if c["job"] == job_id] and time.monotonic() < deadline:
        time.sleep(0.1)
    cancelled = client.post(f"/v1/jobs/{job_id}/cancel")
    assert cancelled.status_code == 202 and cancelled.json()["cancel_requested"] is True

    events = stream(client, job_id)
    assert events[-1]["type"] == "final" and events[-1]["status"] == "cancelled"
    assert client.get(f"/v1/jobs/{job_id}").json()["status"]["state"] == "cancelled"
    assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 409


def test_requests_without_a_token_are_refused(api: Setup) -> None:
    _, _, _, server, client = api
    job_id = client.post("/v1/jobs", json={"goal": "x", "max_rounds": 1}).json()["id"]
    with httpx.Client(base_url=server.url, timeout=30) as anonymous:
        for method, path in [
            ("POST", "/v1/jobs"),
            ("GET", "/v1/jobs"),
            ("GET", f"/v1/jobs/{job_id}"),
            ("GET", f"/v1/jobs/{job_id}/events"),
            ("POST", f"/v1/jobs/{job_id}/cancel"),
        ]:
            response = anonymous.request(method, path, json={"goal": "x"} if method == "POST" else None)
            assert response.status_code == 401, (method, path)
            assert response.json()["error"]["code"] == "unauthorized"
        wrong = anonymous.get("/v1/jobs", headers={"Authorization": "Bearer not-the-token"})
        assert wrong.status_code == 401
        assert anonymous.get("/").status_code == 200  # the console page itself is public


def test_bad_specs_are_422_and_big_bodies_413(api: Setup) -> None:
    _, _, _, _, client = api
    before = {j["job_id"] for j in client.get("/v1/jobs?limit=200").json()["jobs"]}
    bad = client.post("/v1/jobs", json={"goal": "x", "max_rounds": 9999, "colour": "red"})
    assert bad.status_code == 422
    assert {f["field"] for f in bad.json()["error"]["fields"]} == {"max_rounds", "colour"}
    big = client.post("/v1/jobs", json={"goal": "x", "context": "y" * 30000})
    assert big.status_code == 413 and big.json()["error"]["limit"] == 20000
    assert {j["job_id"] for j in client.get("/v1/jobs?limit=200").json()["jobs"]} == before


def test_a_spec_the_workers_refuse_shows_as_failed_and_leaves_nothing_stored(api: Setup) -> None:
    cluster, _, _, _, client = api
    job_id = client.post("/v1/jobs", json={"goal": "g", "tools": ["no_such_tool"]}).json()["id"]
    deadline = time.monotonic() + 60
    body = client.get(f"/v1/jobs/{job_id}").json()
    while body["result"] is None and time.monotonic() < deadline:
        time.sleep(0.2)
        body = client.get(f"/v1/jobs/{job_id}").json()
    assert body["status"]["state"] == "failed"
    assert "no_such_tool" in body["result"]["error"]
    # The intake answers first, then removes the ``queued`` marker submit wrote: wait for that.
    keys = f"tandem:{{{job_id}}}:*"  # every key of the job shares the hash tag {<job id>}
    while list(cluster.redis.scan_iter(keys)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not list(cluster.redis.scan_iter(keys))
    assert stream(client, job_id) == []  # nothing was stored: the stream ends at once
    assert job_id not in [j["job_id"] for j in client.get("/v1/jobs?limit=200").json()["jobs"]]
