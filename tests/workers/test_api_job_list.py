"""The goal in ``GET /v1/jobs``, read from the first bytes of each spec (``job_list``)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from tandem.tasks.spec import JobSpec
from tandem.workers.api.job_list import GOAL_CHARS, STATUS_GOAL_CHARS, goal_of
from tests.workers.test_api import Fixture


@pytest.fixture
def api() -> Iterator[Fixture]:
    fixture = Fixture()
    with fixture.client:
        yield fixture


def test_the_goal_comes_first_in_a_specs_json() -> None:
    spec = JobSpec(goal="first", context="c", metadata={"goal": "not this"})
    assert spec.model_dump_json().startswith('{"goal":"first"')
    assert json.dumps(spec.model_dump(mode="json")).startswith('{"goal": "first"')  # an intake message's


@pytest.mark.parametrize(
    ("head", "goal"),
    [
        pytest.param('{"goal":"Count the words","context":""}', "Count the words", id="plain"),
        pytest.param('{"goal": "say \\"hi\\"\\nthen stop", "x": 1}', 'say "hi" then stop', id="escapes"),
        pytest.param('{"goal":"caf\\u00e9 ok"}', "café ok", id="unicode-escape"),
        pytest.param('{"goal":"cut here \\u00', "cut here…", id="cut-in-an-escape"),
        pytest.param('{"goal":"cut right after\\', "cut right after…", id="cut-after-a-backslash"),
        pytest.param('{"goal":"emoji \\ud83d', "emoji…", id="cut-in-a-surrogate-pair"),
        pytest.param('{"context":"x","goal":"g"}', None, id="goal-not-first"),
        pytest.param("", None, id="nothing"),
    ],
)
def test_goal_of(head: str, goal: str | None) -> None:
    assert goal_of(head) == goal


def test_a_long_goal_is_shortened() -> None:
    shown = goal_of(json.dumps({"goal": "word " * 100}))
    assert shown is not None and len(shown) == GOAL_CHARS and shown.endswith("…")


def test_the_job_list_shows_each_goal(api: Fixture) -> None:
    api.store.create("job-1", JobSpec(goal="Count the words", context="x" * 500_000))
    queued = api.client.post("/v1/jobs", json={"goal": "A queued job's goal"}).json()["id"]
    jobs = {j["job_id"]: j for j in api.client.get("/v1/jobs").json()["jobs"]}
    assert jobs["job-1"]["goal"] == "Count the words" and jobs["job-1"]["state"] == "queued"
    assert jobs[queued]["goal"] == "A queued job's goal"  # from its intake message


def test_a_jobs_status_gives_its_goal_queued_stored_and_long(api: Fixture) -> None:
    # A job no worker took has no spec key and no job_started event: its intake message has the goal.
    queued = api.client.post("/v1/jobs", json={"goal": "Nobody took me yet"}).json()["id"]
    assert api.store.spec(queued) is None
    assert api.client.get(f"/v1/jobs/{queued}").json()["goal"] == "Nobody took me yet"
    long = "word " * 4000  # 20,000 characters, more than one status gives
    api.store.create("job-long", JobSpec(goal=long, context="x" * 500_000))
    shown = api.client.get("/v1/jobs/job-long").json()["goal"]
    assert len(shown) == STATUS_GOAL_CHARS and shown.endswith("…") and long.startswith(shown[:-1])
    listed = {j["job_id"]: j["goal"] for j in api.client.get("/v1/jobs").json()["jobs"]}
    assert len(listed["job-long"]) == GOAL_CHARS  # the list keeps its short goals


def test_a_status_whose_spec_expired_has_no_goal(api: Fixture) -> None:
    api.store.create("job-gone", JobSpec(goal="soon gone"))
    api.store.redis.delete(api.store.key("job-gone", "spec"))
    assert api.client.get("/v1/jobs/job-gone").json()["goal"] is None


def test_a_tenants_list_shows_its_older_job_past_another_tenants_thousand_newer_ones() -> None:
    """``GET /v1/jobs`` for a tenant's token reads that tenant's own index: team-b's 1,050 newer
    jobs fill the newest 1,000 of every tenant, and team-a's job is listed all the same."""
    from tandem.broker_config.api_settings import ApiSettings
    from tandem.broker_config.tokens import ApiToken
    from tandem.tasks.state.recent import RECENT_LIMIT

    scopes = frozenset({"submit", "read"})
    tokens = (
        ApiToken("token-a-0123456789", "team-a", scopes),
        ApiToken("token-o-0123456789", "ops", frozenset({"admin"})),
    )
    fixture = Fixture(tokens=("token-a-0123456789",), api=ApiSettings(tokens=tokens))
    with fixture.client:
        mine = fixture.client.post("/v1/jobs", json={"goal": "team-a's job"}).json()["id"]
        store = fixture.store
        pipe = store.redis.pipeline(transaction=False)
        for i in range(RECENT_LIMIT + 50):  # newer than team-a's job
            store.remember(f"theirs-{i}", time.time() + 1 + i, owner="team-b", pipe=pipe)
            pipe.hset(store.key(f"theirs-{i}", "state"), mapping={"state": "queued", "owner": "team-b"})
        pipe.execute()
        listed = fixture.client.get("/v1/jobs?limit=200").json()["jobs"]
        assert [(j["job_id"], j["goal"]) for j in listed] == [(mine, "team-a's job")]
        admin = {"Authorization": "Bearer token-o-0123456789"}
        newest = fixture.client.get("/v1/jobs?limit=200", headers=admin).json()["jobs"]
        assert len(newest) == 200 and {j["owner"] for j in newest} == {"team-b"}  # crowded out there
