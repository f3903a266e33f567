"""``GET /v1/jobs/{id}/children`` (in process, fakeredis): a job's children with their goals and
states, oldest first, and each child's parent; a job of another tenant listed in the children index
is left out, a spec merely naming a parent has none, another tenant's job is 404."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tandem.broker_config.api_settings import ApiSettings
from tandem.broker_config.tokens import ApiToken
from tandem.tasks.spec import JobResult, JobSpec
from tests.workers.test_api import Fixture

A, B, READER = (f"token-{name}-0123456789" for name in ("a", "b", "reader"))
TOKENS = (
    ApiToken(A, "team-a", frozenset({"submit", "control"})),
    ApiToken(B, "team-b", frozenset({"submit", "read", "control"})),
    ApiToken(READER, "team-a", frozenset({"read"})),
)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def job(api: Fixture, job_id: str, goal: str, owner: str, parent: str | None = None) -> None:
    api.store.create(job_id, JobSpec(goal=goal, owner=owner, parent_id=parent))
    api.store.mark_queued(job_id, owner=owner)


def listed(api: Fixture, parent: str, *children: str) -> None:
    """``children`` in ``parent``'s children index, as a spawn writes it."""
    key = api.store.key(parent, "children")
    api.store.redis.zadd(key, {c: n for n, c in enumerate(children)})
    api.store.redis.expire(key, 600)


@pytest.fixture
def api() -> Iterator[Fixture]:
    fixture = Fixture(api=ApiSettings(tokens=TOKENS))
    job(fixture, "parent", "write the report", "team-a")
    job(fixture, "child-1", "read document one", "team-a", parent="parent")
    job(fixture, "child-2", "read document two", "team-a", parent="parent")
    job(fixture, "grandchild", "read a footnote", "team-a", parent="child-1")
    # Team-b's job under an id in team-a's index (a client submitted it there first): not a child.
    job(fixture, "intruder", "team-b's own job", "team-b", parent="parent")
    # A team-a job whose spec names the parent, but which the parent never started.
    job(fixture, "stray", "names a parent", "team-a", parent="parent")
    listed(fixture, "parent", "child-1", "intruder", "child-2")
    listed(fixture, "child-1", "grandchild")
    fixture.store.finish(
        JobResult(
            job_id="child-1", status="completed", deliverable="one", owner="team-a", children=["grandchild"]
        )
    )
    fixture.store.finish(JobResult(job_id="grandchild", status="failed", error="no footnote", owner="team-a"))
    fixture.store.set_status("child-2", state="running")
    with fixture.client:
        yield fixture


def test_a_parent_lists_its_children_oldest_first_with_their_goals_and_states(api: Fixture) -> None:
    got = api.client.get("/v1/jobs/parent/children", headers=auth(READER))
    assert got.status_code == 200, got.text
    assert got.json() == {
        "id": "parent",
        "parent_id": None,
        "children": [
            {"job_id": "child-1", "goal": "read document one", "state": "completed", "error": None},
            {"job_id": "child-2", "goal": "read document two", "state": "running", "error": None},
        ],
    }


def test_a_child_names_its_parent_and_lists_its_own_children(api: Fixture) -> None:
    got = api.client.get("/v1/jobs/child-1/children", headers=auth(READER)).json()
    assert got["parent_id"] == "parent"
    assert got["children"] == [
        {"job_id": "grandchild", "goal": "read a footnote", "state": "failed", "error": "no footnote"}
    ]
    leaf = api.client.get("/v1/jobs/grandchild/children", headers=auth(READER)).json()
    assert (leaf["parent_id"], leaf["children"]) == ("child-1", [])


def test_a_spec_that_only_names_a_parent_has_none(api: Fixture) -> None:
    assert api.client.get("/v1/jobs/stray/children", headers=auth(READER)).json()["parent_id"] is None
    # Team-b's job listed in team-a's index: its owner reads it, with no parent of team-a's.
    theirs = api.client.get("/v1/jobs/intruder/children", headers=auth(B))
    assert theirs.status_code == 200 and theirs.json()["parent_id"] is None


def test_another_tenant_and_a_token_without_read_are_refused(api: Fixture) -> None:
    foreign = api.client.get("/v1/jobs/parent/children", headers=auth(B))
    unknown = api.client.get("/v1/jobs/nothing/children", headers=auth(B))
    assert foreign.status_code == unknown.status_code == 404
    assert foreign.json()["error"]["code"] == unknown.json()["error"]["code"] == "unknown_job"
    no_read = api.client.get("/v1/jobs/parent/children", headers=auth(A))
    assert no_read.status_code == 403 and no_read.json()["error"]["code"] == "missing_scope"


def test_the_route_is_in_the_openapi_document(api: Fixture) -> None:
    paths = api.client.get("/openapi.json", headers=auth(READER)).json()["paths"]
    assert paths["/v1/jobs/{job_id}/children"]["get"]["operationId"] == "getChildren"
