"""One refusal for "not yours" and "does not exist" on every route of ``tandem api`` that names a
job (in process, fakeredis).

Team-a's token asks each route for team-b's job (ended, with events, an artifact and a thread) and
for an id no job has, of the same length: the answers are the same answer (status, every header
but ``date``, and the body word for word once the ids are swapped), and nothing in Redis changed.
Team-b's token then reads the same job on each read route: the refusal came from the owner alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tandem.broker_config.api_settings import ApiSettings
from tandem.broker_config.tokens import ApiToken
from tandem.tasks.control.threads import index_job
from tandem.tasks.spec import JobResult, JobSpec
from tests.tasks.test_one_refusal import keyspace, unchanged
from tests.workers.test_api import Fixture

A, B = "token-of-team-a-0123456789", "token-of-team-b-0123456789"
SCOPES = frozenset({"submit", "read", "control", "approve"})
THEIRS = "job-of-team-b-01"
NOBODY = "no-such-job-0001"  # as long as THEIRS
THREAD = "thread-of-b-0001"
HANDLE = "r0-c1-5be2a3c0d1"

ROUTES: list[tuple[str, str, Any]] = [
    ("GET", "/v1/jobs/{job}", None),
    ("GET", "/v1/jobs/{job}/events", None),
    ("GET", "/v1/jobs/{job}/events?after=$", None),
    ("GET", "/v1/jobs/{job}/children", None),
    ("GET", "/v1/jobs/{job}/artifacts/" + HANDLE, None),
    ("POST", "/v1/jobs/{job}/cancel", None),
    ("POST", "/v1/jobs/{job}/decisions", {"pause_id": "{job}:0:tools:1", "decisions": True}),
    ("POST", "/v1/jobs/{job}/answers", {"pause_id": "{job}:0:tools:1", "answer": "Oslo"}),
    ("POST", "/v1/jobs/{job}/resume", {"max_rounds": 9}),
    ("POST", "/v1/jobs/{job}/fork", {"round": 1, "goal": "again"}),
    ("POST", "/v1/jobs/{job}/messages", {"text": "hello", "idempotency_key": "k-1"}),
    ("POST", "/v1/jobs/{job}/follow-up", {"goal": "and now", "idempotency_key": "k-1"}),
    ("GET", "/v1/threads/{thread}", None),
]


@pytest.fixture
def api() -> Iterator[Fixture]:
    tokens = (ApiToken(A, "team-a", SCOPES), ApiToken(B, "team-b", SCOPES))
    fixture = Fixture(tokens=(A,), api=ApiSettings(tokens=tokens))
    with fixture.client:
        yield fixture


def theirs(api: Fixture) -> None:
    """Team-b's job: ended, with its events, an artifact and a thread."""
    api.store.create(THEIRS, JobSpec(goal="b's goal", owner="team-b", thread_id=THREAD))
    api.store.publish(THEIRS, "job_started", {"spec": {"goal": "b's goal"}})
    api.store.artifacts(THEIRS).put(HANDLE, "the whole output")
    index_job(api.store, THREAD, THEIRS, 600)
    api.store.finish(JobResult(job_id=THEIRS, status="failed", error="x", owner="team-b"), ttl=600)


def ask(api: Fixture, token: str, method: str, path: str, body: Any, job: str, thread: str) -> Any:
    url = path.format(job=job, thread=thread)
    sent = (
        None if body is None else {k: v.format(job=job) if isinstance(v, str) else v for k, v in body.items()}
    )
    return api.client.request(method, url, json=sent, headers={"Authorization": f"Bearer {token}"})


def job_routes(app: Any) -> set[tuple[str, str]]:
    """Every (method, path) of the API that names a job or a thread (its middleware unwrapped)."""
    while not hasattr(app, "router"):
        app = app.app
    return {
        (method, route.path)
        for route in app.router.routes
        for method in getattr(route, "methods", None) or ()
        if method != "HEAD" and ("{job_id}" in route.path or "{thread_id}" in route.path)
    }


def test_the_table_names_every_route_that_takes_a_job_or_a_thread(api: Fixture) -> None:
    tabled = {
        (method, path.split("?")[0].format(job="{job_id}", thread="{thread_id}").replace(HANDLE, "{handle}"))
        for method, path, _ in ROUTES
    }
    assert job_routes(api.app) == tabled


@pytest.mark.parametrize(("method", "path", "body"), ROUTES, ids=[f"{m} {p}" for m, p, _ in ROUTES])
def test_another_tenants_job_answers_word_for_word_as_no_job(
    api: Fixture, method: str, path: str, body: Any
) -> None:
    theirs(api)
    before = keyspace(api.store.redis)
    foreign = ask(api, A, method, path, body, THEIRS, THREAD)
    missing = ask(api, A, method, path, body, NOBODY, "no-such-thread-1")
    unchanged(before, keyspace(api.store.redis))

    assert foreign.status_code == missing.status_code == 404, (foreign.text, missing.text)
    assert foreign.text == missing.text.replace(NOBODY, THEIRS).replace("no-such-thread-1", THREAD)
    drop = {"date"}
    assert {k: v for k, v in foreign.headers.items() if k not in drop} == {
        k: v for k, v in missing.headers.items() if k not in drop
    }
    code = foreign.json()["error"]["code"]
    assert code == {"artifacts": "unknown_artifact", "threads": "unknown_thread"}.get(
        path.split("/")[-2] if "artifacts" in path else path.split("/")[2], "unknown_job"
    )


@pytest.mark.parametrize(
    "path",
    [
        "/v1/jobs/{job}",
        "/v1/jobs/{job}/events",
        "/v1/jobs/{job}/children",
        "/v1/jobs/{job}/artifacts/" + HANDLE,
        "/v1/threads/{thread}",
    ],
)
def test_the_owner_reads_what_others_are_refused(api: Fixture, path: str) -> None:
    theirs(api)
    assert ask(api, B, "GET", path, None, THEIRS, THREAD).status_code == 200
