"""``tandem api`` in process: Starlette's test client, fakeredis, a Celery app on an in-memory broker."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import fakeredis
import httpx
import pytest
from celery import Celery
from starlette.testclient import TestClient

from tandem.broker_config import Settings
from tandem.broker_config.api_settings import ApiSettings
from tandem.broker_config.errors import SettingsError
from tandem.tasks.job_events import ModelDelta, RoundStarted
from tandem.tasks.spec import JobResult, JobSpec
from tandem.tasks.state.store import JobStore
from tandem.workers.api import create_api
from tandem.workers.api.server import check_exposure, is_loopback
from tandem.workers.errors import ApiExposureError

TOKEN = "a-token-of-some-length"


class _InProcess(httpx.BaseTransport):
    """Hands each request to a Starlette ``TestClient`` with exactly its own headers (none of the
    ``TestClient``'s), and streams the answer back (Starlette's test client speaks ``httpx2``)."""

    def __init__(self, client: TestClient) -> None:
        self.client = client

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        inner = self.client.build_request(request.method, str(request.url), content=request.read())
        inner.headers = type(inner.headers)(list(request.headers.multi_items()))
        answer = self.client.send(inner, stream=True)
        return httpx.Response(answer.status_code, headers=answer.headers.multi_items(), stream=_Body(answer))


class _Body(httpx.SyncByteStream):
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def __iter__(self) -> Iterator[bytes]:
        yield from self.answer.iter_raw()

    def close(self) -> None:
        self.answer.close()


class Fixture:
    def __init__(
        self,
        tokens: tuple[str, ...] = (),
        max_body: int = 4096,
        api: ApiSettings | None = None,
        base_url: str = "http://localhost",
    ) -> None:
        self.server = fakeredis.FakeServer()
        self.settings = replace(
            Settings.from_env({}), api_tokens=tokens, api_max_body=max_body, api=api or ApiSettings()
        )
        self.celery = Celery("test-api", broker="memory://", backend="cache+memory://")
        self.store = JobStore.from_settings(fakeredis.FakeRedis(server=self.server), self.settings)
        self.app = create_api(
            self.settings,
            celery_app=self.celery,
            redis=fakeredis.FakeRedis(server=self.server),
            async_redis=fakeredis.FakeAsyncRedis(server=self.server),
            heartbeat=0.2,
        )
        headers = {"Authorization": f"Bearer {tokens[0]}"} if tokens else {}
        self.client = TestClient(self.app, base_url=base_url, headers=headers)

    def transport(self) -> httpx.BaseTransport:
        """A transport to this app for ``tandem.Client``: each request as the client built it (URL,
        token), answered in process (the ``TestClient``'s own headers are not added)."""
        return _InProcess(self.client)

    def async_transport(self) -> httpx.AsyncBaseTransport:
        """A transport to this app for ``tandem.AsyncClient``."""
        return httpx.ASGITransport(app=self.app)

    def ended_job(self, job_id: str = "job-1") -> list[str]:
        """A job with four events, the last one ``final``; returns their stream ids."""
        self.store.create(job_id, JobSpec(goal="g"))
        ids = [
            self.store.publish(job_id, "job_started", {"spec": {"goal": "g"}}),
            self.store.publish(job_id, RoundStarted(round=0, max_rounds=3)),
            self.store.publish(job_id, ModelDelta(round=0, role="actor", attempt="x", content="Hel")),
        ]
        self.store.finish(JobResult(job_id=job_id, status="completed", deliverable="Hello"), ttl=60)
        ids.append(self.store.read_events(job_id, after=ids[-1])[0].id)
        return ids


@pytest.fixture
def api() -> Iterator[Fixture]:
    fixture = Fixture()
    with fixture.client:
        yield fixture


def sse(text: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The events (id, event, data) and the comment lines of an SSE body."""
    events, comments = [], []
    for block in text.split("\n\n"):
        fields: dict[str, Any] = {}
        for line in block.splitlines():
            if line.startswith(":"):
                comments.append(line[1:].strip())
            elif ": " in line:
                key, value = line.split(": ", 1)
                fields[key] = json.loads(value) if key == "data" else value
        if "data" in fields:
            events.append(fields)
    return events, comments


# -- jobs -------------------------------------------------------------------------------------------


def test_a_job_is_created_read_and_listed(api: Fixture) -> None:
    created = api.client.post("/v1/jobs", json={"goal": "count", "reasoner": "mono", "max_rounds": 3})
    assert created.status_code == 202, created.text
    body = created.json()
    job_id = body["id"]
    assert created.headers["location"] == f"/v1/jobs/{job_id}"
    assert body["status"]["state"] == "queued" and body["status"]["reasoner"] == "mono"
    assert body["links"]["events"] == f"/v1/jobs/{job_id}/events"

    read = api.client.get(f"/v1/jobs/{job_id}").json()
    assert read["id"] == job_id and read["status"]["state"] == "queued" and read["result"] is None
    listed = api.client.get("/v1/jobs").json()["jobs"]
    assert [j["job_id"] for j in listed] == [job_id]


def test_an_ended_job_shows_its_result(api: Fixture) -> None:
    api.ended_job("done-1")
    body = api.client.get("/v1/jobs/done-1").json()
    assert body["status"]["state"] == "completed"
    assert body["result"]["deliverable"] == "Hello"


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        pytest.param({"goal": "g", "max_rounds": 0}, "max_rounds", "greater than or equal to 1", id="range"),
        pytest.param({"goal": "   "}, "goal", "the goal is blank", id="blank-goal"),
        pytest.param({"goal": "g", "reasonr": "mono"}, "reasonr", "unknown field", id="typo"),
        pytest.param({}, "goal", "Field required", id="missing"),
        pytest.param({"goal": "g", "reasoner": "trio"}, "reasoner", "'dual', 'mono' or 'react'", id="enum"),
    ],
)
def test_a_bad_spec_is_422_naming_the_field(
    api: Fixture, spec: dict[str, Any], field: str, message: str
) -> None:
    response = api.client.post("/v1/jobs", json=spec)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "invalid_spec"
    assert [f["field"] for f in error["fields"]] == [field]
    assert message in error["fields"][0]["message"] and field in error["message"]
    assert api.client.get("/v1/jobs").json()["jobs"] == []  # nothing was queued


def test_a_spec_over_a_limit_is_422_naming_the_limit(api: Fixture) -> None:
    deep: dict[str, Any] = {}
    for _ in range(40):
        deep = {"k": deep}
    response = api.client.post("/v1/jobs", json={"goal": "g", "metadata": deep})
    assert response.status_code == 422
    assert "TANDEM_MAX_METADATA_DEPTH" in response.json()["error"]["message"]
    assert api.client.get("/v1/jobs").json()["jobs"] == []


def test_a_body_that_is_not_a_json_object_is_refused(api: Fixture) -> None:
    assert api.client.post("/v1/jobs", json=["goal"]).status_code == 422
    bad = api.client.post("/v1/jobs", content=b"{goal", headers={"Content-Type": "application/json"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_json"
    form = api.client.post("/v1/jobs", data={"goal": "g"})
    assert form.status_code == 415 and "application/json" in form.json()["error"]["message"]


def test_an_oversized_body_is_413(api: Fixture) -> None:
    big = {"goal": "g", "context": "x" * 5000}
    declared = api.client.post("/v1/jobs", json=big)
    assert declared.status_code == 413
    assert declared.json()["error"] == {
        "code": "body_too_large",
        "message": declared.json()["error"]["message"],
        "limit": 4096,
    }
    assert "TANDEM_API_MAX_BODY" in declared.json()["error"]["message"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted while read
        yield b'{"goal": "g", "context": "'
        for _ in range(10):
            yield b"x" * 1000
        yield b'"}'

    chunked = api.client.post("/v1/jobs", content=chunks(), headers={"Content-Type": "application/json"})
    assert chunked.status_code == 413
    assert api.client.get("/v1/jobs").json()["jobs"] == []


def test_unknown_jobs_and_routes_are_json_404s(api: Fixture) -> None:
    for path in ("/v1/jobs/nope", "/v1/jobs/nope/events"):
        response = api.client.get(path)
        assert response.status_code == 404 and response.json()["error"]["code"] == "unknown_job"
    assert api.client.post("/v1/jobs/nope/cancel").status_code == 404
    missing = api.client.get("/v2/things")
    assert missing.status_code == 404 and "/openapi.json" in missing.json()["error"]["message"]
    wrong = api.client.delete("/v1/jobs")
    assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method_not_allowed"


def test_cancel_ends_a_queued_job_and_then_is_409(api: Fixture) -> None:
    job_id = api.client.post("/v1/jobs", json={"goal": "g"}).json()["id"]
    cancelled = api.client.post(f"/v1/jobs/{job_id}/cancel")
    assert cancelled.status_code == 202 and cancelled.json()["cancel_requested"] is True
    body = api.client.get(f"/v1/jobs/{job_id}").json()
    assert body["status"]["state"] == "cancelled" and body["result"]["status"] == "cancelled"
    again = api.client.post(f"/v1/jobs/{job_id}/cancel")
    assert again.status_code == 409 and "already ended (cancelled)" in again.json()["error"]["message"]


# -- events -----------------------------------------------------------------------------------------


def test_the_event_stream_runs_to_the_final_event(api: Fixture) -> None:
    ids = api.ended_job()
    response = api.client.get("/v1/jobs/job-1/events")
    assert response.headers["content-type"].startswith("text/event-stream")
    events, _ = sse(response.text)
    assert [e["id"] for e in events] == ids
    assert [e["event"] for e in events] == ["job_started", "round_started", "model_delta", "final"]
    assert events[2]["data"] == {
        "id": ids[2],
        "type": "model_delta",
        "at": events[2]["data"]["at"],
        "round": 0,
        "role": "actor",
        "attempt": "x",
        "seq": 0,
        "reasoning": "",
        "content": "Hel",
    }
    assert events[-1]["data"]["deliverable"] == "Hello"


def test_the_event_stream_resumes_after_last_event_id(api: Fixture) -> None:
    ids = api.ended_job()
    resumed, _ = sse(api.client.get("/v1/jobs/job-1/events", headers={"Last-Event-ID": ids[1]}).text)
    assert [e["id"] for e in resumed] == ids[2:]
    by_query, _ = sse(api.client.get(f"/v1/jobs/job-1/events?after={ids[0]}").text)
    assert [e["id"] for e in by_query] == ids[1:]
    after_final, _ = sse(api.client.get("/v1/jobs/job-1/events", headers={"Last-Event-ID": ids[-1]}).text)
    assert after_final == []  # the job ended: the stream closes instead of waiting
    bad = api.client.get("/v1/jobs/job-1/events", headers={"Last-Event-ID": "yesterday"})
    assert bad.status_code == 400 and "'yesterday'" in bad.json()["error"]["message"]


def test_an_idle_stream_sends_heartbeats_until_the_final_event(api: Fixture) -> None:
    api.store.create("live", JobSpec(goal="g"))
    api.store.set_status("live", state="running")

    def finish_later() -> None:
        api.store.publish("live", RoundStarted(round=0, max_rounds=1))
        api.store.finish(JobResult(job_id="live", status="completed"), ttl=60)

    timer = threading.Timer(0.9, finish_later)
    timer.start()
    events, comments = sse(api.client.get("/v1/jobs/live/events").text)
    timer.join()
    assert [e["event"] for e in events] == ["round_started", "final"]
    assert comments.count("heartbeat") >= 2


# -- auth, documents, console ----------------------------------------------------------------------


def test_tokens_are_required_when_configured() -> None:
    fixture = Fixture(tokens=(TOKEN, "another-token-here"))
    with TestClient(fixture.app, base_url="http://localhost") as anonymous:
        refused = anonymous.get("/v1/jobs")
        assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Bearer")
        assert "Authorization: Bearer" in refused.json()["error"]["message"]
        wrong = anonymous.post("/v1/jobs", json={"goal": "g"}, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and "not valid" in wrong.json()["error"]["message"]
        assert (
            anonymous.get("/v1/jobs", headers={"Authorization": "Bearer another-token-here"}).status_code
            == 200
        )
        # The console page, its assets and the documents hold no job data.
        assert anonymous.get("/").status_code == 200
        assert anonymous.get("/console.js").status_code == 200
        assert anonymous.get("/openapi.json").status_code == 200
    with fixture.client as authorized:
        assert authorized.post("/v1/jobs", json={"goal": "g"}).status_code == 202


def test_the_openapi_document_names_every_endpoint(api: Fixture) -> None:
    doc = api.client.get("/openapi.json").json()
    assert doc["openapi"].startswith("3.1")
    assert set(doc["paths"]) == {
        "/v1/jobs",
        "/v1/jobs/{job_id}",
        "/v1/jobs/{job_id}/events",
        "/v1/jobs/{job_id}/cancel",
        "/v1/jobs/{job_id}/children",
        "/v1/jobs/{job_id}/artifacts/{handle}",
        "/v1/jobs/{job_id}/decisions",
        "/v1/jobs/{job_id}/answers",
        "/v1/jobs/{job_id}/resume",
        "/v1/jobs/{job_id}/fork",
        "/v1/jobs/{job_id}/messages",
        "/v1/jobs/{job_id}/follow-up",
        "/v1/threads/{thread_id}",
        "/v1/me",
        "/healthz",
    }
    schemas = doc["components"]["schemas"]
    assert {"JobSpec", "JobStatus", "JobResult", "Usage", "Error", "Job", "JobEvent"} <= set(schemas)
    assert "goal" in schemas["JobSpec"]["required"]
    refs = json.dumps(doc)
    for ref in {r.split('"')[0] for r in refs.split('"$ref": "#/components/schemas/')[1:]}:
        assert ref in schemas, ref


def test_the_console_is_served_and_uses_only_the_public_api(api: Fixture) -> None:
    page = api.client.get("/")
    assert page.headers["content-type"].startswith("text/html")
    assert '<script src="console.js">' in page.text and 'id="deliverable"' in page.text
    script = api.client.get("/console.js").text
    called = re.findall(r"api\(\s*[`\"]([^`\"]+)", script)
    public = ("/v1/jobs", "/v1/me", "/v1/threads")
    assert len(called) >= 6 and all(p.startswith(public) for p in called), called
    assert script.count("fetch(") == 1  # every request goes through api(), with the token
    assert "innerHTML" not in script  # model text is inserted as text only
    assert api.client.get("/console.css").status_code == 200
    assert api.client.get("/healthz").json() == {"ok": True}


# -- where it may listen -----------------------------------------------------------------------------


def test_it_refuses_a_public_address_without_tokens() -> None:
    settings = Settings.from_env({})
    for host in ("127.0.0.1", "::1", "localhost"):
        assert is_loopback(host)
        check_exposure(host, settings)
    assert not is_loopback("0.0.0.0")
    with pytest.raises(ApiExposureError, match=r"'0.0.0.0' without tokens.*TANDEM_API_TOKENS"):
        check_exposure("0.0.0.0", settings)
    check_exposure("0.0.0.0", replace(settings, api_tokens=(TOKEN,)))


def test_api_settings_are_read_and_checked() -> None:
    settings = Settings.from_env(
        {"TANDEM_API_TOKENS": f" {TOKEN}, second-token-value ", "TANDEM_API_MAX_BODY": "2048"}
    )
    assert settings.api_tokens == (TOKEN, "second-token-value") and settings.api_max_body == 2048
    assert TOKEN not in repr(settings)
    with pytest.raises(SettingsError, match="TANDEM_API_TOKENS holds a token of 5 characters"):
        Settings.from_env({"TANDEM_API_TOKENS": "short"})
    with pytest.raises(SettingsError, match="TANDEM_API_MAX_BODY"):
        Settings.from_env({"TANDEM_API_MAX_BODY": "10"})


# -- decisions ---------------------------------------------------------------------------------------


def test_decisions_reach_the_job_handle_and_refusals_are_409(
    api: Fixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tandem.client.handle import JobHandle
    from tandem.tasks.errors import DecisionRefused

    job_id = api.client.post("/v1/jobs", json={"goal": "g"}).json()["id"]
    asked: list[Any] = []

    def answer(self: JobHandle, decisions: Any, **kw: Any) -> dict[str, Any]:
        asked.append((self.id, decisions, kw["pause_id"], kw["idempotency_key"]))
        if decisions is False:
            raise DecisionRefused(f"job {self.id!r} is not waiting for a decision; nothing was decided")
        done = [{"index": 1, "approve": True}]
        return {"accepted": True, "pause_id": "p", "complete": True, "decisions": done}

    monkeypatch.setattr(JobHandle, "decision_answer", answer)
    ok = api.client.post(f"/v1/jobs/{job_id}/decisions", json={"decisions": [{"index": 1, "approve": True}]})
    assert ok.status_code == 200 and ok.json()["decisions"][0]["approve"] is True
    assert ok.json()["pause_id"] == "p" and ok.json()["complete"] is True
    refused = api.client.post(
        f"/v1/jobs/{job_id}/decisions", json={"decisions": False}, headers={"Idempotency-Key": "k"}
    )
    assert refused.status_code == 409 and "not waiting for a decision" in refused.json()["error"]["message"]
    bad = api.client.post(f"/v1/jobs/{job_id}/decisions", json={"approve": "yes"})
    assert bad.status_code == 422 and bad.json()["error"]["fields"][0]["field"] == "decisions"
    bad_pause = api.client.post(f"/v1/jobs/{job_id}/decisions", json={"decisions": True, "pause_id": 3})
    assert bad_pause.status_code == 422 and bad_pause.json()["error"]["fields"][0]["field"] == "pause_id"
    assert asked == [(job_id, [{"index": 1, "approve": True}], None, None), (job_id, False, None, "k")]
    assert api.client.get(f"/v1/jobs/{job_id}").json()["approval"] is None
    assert api.client.post("/v1/jobs/nope/decisions", json={"decisions": True}).status_code == 404


# -- resume and fork ---------------------------------------------------------------------------------


class _Answered:
    def __init__(self, value: Any) -> None:
        self.value = value

    def get(self, timeout: float | None = None) -> Any:
        return self.value


def test_resume_and_fork_go_through_the_tasks_and_refusals_map_to_codes(
    api: Fixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tasks run here, on the API's fakeredis, as a worker would run them."""
    from tandem.reasoner.messages import ModelMessage
    from tandem.tasks import runtime as runtime_module
    from tandem.tasks.control import resume as resume_module
    from tandem.tasks.runtime import Runtime
    from tandem.tasks.steps import dispatch

    rt = Runtime(api.settings)
    rt.__dict__["redis"] = fakeredis.FakeRedis(server=api.server)
    monkeypatch.setattr(runtime_module, "_runtime", rt)
    sent: list[Any] = []
    monkeypatch.setattr(dispatch.app, "send_task", lambda name, args, **kw: sent.append((name, args)))
    monkeypatch.setattr(resume_module.app.backend, "forget", lambda job_id: None)
    tasks = {"tandem.resume": resume_module.resume, "tandem.fork": resume_module.fork}
    monkeypatch.setattr(
        api.celery, "send_task", lambda name, kwargs, **kw: _Answered(tasks[name].apply(kwargs=kwargs).get())
    )
    spec = JobSpec(goal="g", max_rounds=1)
    first = (0, "thinker")
    assert rt.machine.create("job-1", spec.model_dump_json(), "dual", first, [], timeout=60, ttl_after=60)
    memory = rt.store.memory("job-1")
    memory.add_message(ModelMessage(role="thinker", round=0, content="<instruction>go</instruction>"))
    memory.add_message(ModelMessage(role="actor", round=0, content="<action>thinking</action>"))
    running = api.client.post("/v1/jobs/job-1/resume")
    assert running.status_code == 409 and "is running, not ended" in running.json()["error"]["message"]
    rt.machine.finish("job-1", '{"job_id": "job-1", "status": "truncated"}', "truncated", "", 60)

    low = api.client.post("/v1/jobs/job-1/resume", json={"max_rounds": 1})
    assert low.status_code == 422 and "has used 1 round(s) already" in low.json()["error"]["message"]
    bad = api.client.post("/v1/jobs/job-1/resume", json={"max_rounds": "many"})
    assert bad.status_code == 422 and bad.json()["error"]["fields"][0]["field"] == "max_rounds"
    far = api.client.post("/v1/jobs/job-1/fork", json={"round": 5})
    assert far.status_code == 422 and "outside the stored rounds" in far.json()["error"]["message"]
    spent = api.client.post("/v1/jobs/job-1/fork", json={"round": 1})
    assert spent.status_code == 422 and "would end truncated at once" in spent.json()["error"]["message"]
    forked = api.client.post("/v1/jobs/job-1/fork", json={"round": 1, "goal": "other", "max_rounds": 3})
    assert forked.status_code == 202 and forked.json()["forked_from"] == "job-1"
    fork_id = forked.json()["id"]
    assert forked.headers["location"] == f"/v1/jobs/{fork_id}" and fork_id != "job-1"
    assert api.client.get(f"/v1/jobs/{fork_id}").json()["status"]["round"] == 1
    assert ("tandem.thinker_turn", [fork_id, 1]) in sent

    resumed = api.client.post("/v1/jobs/job-1/resume", json={"max_rounds": 4})
    assert resumed.status_code == 202, resumed.json()
    assert resumed.json()["status"]["state"] == "running" and resumed.json()["status"]["round"] == 1
    assert ("tandem.thinker_turn", ["job-1", 1]) in sent
    assert api.client.get("/v1/jobs/job-1").json()["result"] is None  # the old result no longer answers
    assert api.client.post("/v1/jobs/nope/resume").status_code == 404
