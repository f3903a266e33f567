"""Owners and scopes in ``tandem api`` (in process, fakeredis): each token acts for one tenant
with its scopes; another tenant's job answers 404 like an unknown one, a missing scope 403."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tandem.broker_config import Settings
from tandem.broker_config.api_settings import ApiSettings
from tandem.broker_config.errors import SettingsError
from tandem.broker_config.tokens import PLAIN_SCOPES, ApiToken, parse_tokens
from tests.workers.test_api import Fixture

A, B, READER, ADMIN, PLAIN = (f"token-{name}-0123456789" for name in ("a", "b", "reader", "admin", "plain"))
TOKENS = (
    ApiToken(A, "team-a", frozenset({"submit", "read", "control", "approve"})),
    ApiToken(B, "team-b", frozenset({"submit", "read", "control", "approve"})),
    ApiToken(READER, "team-a", frozenset({"read"})),
    ApiToken(ADMIN, "ops", frozenset({"admin"})),
)


@pytest.fixture
def api() -> Iterator[Fixture]:
    fixture = Fixture(tokens=(PLAIN,), api=ApiSettings(tokens=TOKENS))
    with fixture.client:
        yield fixture


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def submit(api: Fixture, token: str, **spec: object) -> str:
    created = api.client.post("/v1/jobs", json={"goal": "g", **spec}, headers=auth(token))
    assert created.status_code == 202, created.text
    return str(created.json()["id"])


def test_a_job_records_the_tenant_of_the_token_that_submitted_it(api: Fixture) -> None:
    job = submit(api, A)
    assert api.client.get(f"/v1/jobs/{job}", headers=auth(A)).json()["status"]["owner"] == "team-a"
    assert api.store.machine.record(job)["owner"] == "team-a"
    plain = submit(api, PLAIN)  # an old comma-separated token: the default tenant
    assert api.client.get(f"/v1/jobs/{plain}", headers=auth(PLAIN)).json()["status"]["owner"] == "default"


def test_another_tenants_job_answers_exactly_like_an_unknown_job(api: Fixture) -> None:
    job = submit(api, A)
    unknown = api.client.get("/v1/jobs/no-such-job", headers=auth(B))
    for method, path, body in (
        ("GET", "", None),
        ("GET", "/events", None),
        ("POST", "/cancel", None),
        ("POST", "/decisions", {"decisions": True}),
        ("POST", "/resume", None),
        ("POST", "/fork", {"round": 1}),
    ):
        seen = api.client.request(method, f"/v1/jobs/{job}{path}", json=body, headers=auth(B))
        assert seen.status_code == 404, (path, seen.text)
        assert seen.json()["error"]["code"] == unknown.json()["error"]["code"] == "unknown_job"
        assert seen.json()["error"]["message"] == unknown.json()["error"]["message"].replace(
            "no-such-job", job
        )
    assert api.client.get(f"/v1/jobs/{job}", headers=auth(A)).json()["status"]["state"] == "queued"


def test_the_list_holds_the_tenants_own_jobs_and_every_job_for_admin(api: Fixture) -> None:
    a, b, plain = submit(api, A), submit(api, B), submit(api, PLAIN)

    def listed(token: str) -> set[str]:
        return {j["job_id"] for j in api.client.get("/v1/jobs", headers=auth(token)).json()["jobs"]}

    assert listed(A) == listed(READER) == {a}
    assert listed(B) == {b} and listed(PLAIN) == {plain}
    assert listed(ADMIN) == {a, b, plain}
    assert api.client.get(f"/v1/jobs/{b}", headers=auth(ADMIN)).status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "body", "scope"),
    [
        pytest.param("POST", "/v1/jobs", {"goal": "g"}, "submit", id="submit"),
        pytest.param("POST", "/v1/jobs/{job}/cancel", None, "control", id="cancel"),
        pytest.param("POST", "/v1/jobs/{job}/resume", None, "control", id="resume"),
        pytest.param("POST", "/v1/jobs/{job}/fork", {"round": 1}, "control", id="fork"),
        pytest.param("POST", "/v1/jobs/{job}/decisions", {"decisions": True}, "approve", id="decide"),
    ],
)
def test_a_missing_scope_answers_403_naming_it(
    api: Fixture, method: str, path: str, body: object, scope: str
) -> None:
    job = submit(api, A)
    answer = api.client.request(method, path.format(job=job), json=body, headers=auth(READER))
    assert answer.status_code == 403, answer.text
    error = answer.json()["error"]
    assert error["code"] == "missing_scope" and error["scope"] == scope and repr(scope) in error["message"]
    assert api.client.get(f"/v1/jobs/{job}", headers=auth(READER)).status_code == 200  # read it may


def test_a_token_submits_for_its_own_tenant_only_and_admin_for_any(api: Fixture) -> None:
    refused = api.client.post("/v1/jobs", json={"goal": "g", "owner": "team-b"}, headers=auth(A))
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "foreign_owner"
    assert submit(api, A, owner="team-a")
    job = submit(api, ADMIN, owner="team-b")
    assert api.client.get(f"/v1/jobs/{job}", headers=auth(B)).json()["status"]["owner"] == "team-b"
    assert api.client.get(f"/v1/jobs/{submit(api, ADMIN)}", headers=auth(A)).status_code == 404  # "ops"


# -- the tokens' format -------------------------------------------------------------------------


def test_old_comma_separated_tokens_keep_full_access_on_the_default_tenant() -> None:
    settings = Settings.from_env({"TANDEM_API_TOKENS": f"{A}, {B}"})
    assert settings.api_tokens == (A, B)
    assert [(t.tenant, t.scopes) for t in settings.api.tokens] == [("default", PLAIN_SCOPES)] * 2


def test_json_tokens_and_a_tokens_file(tmp_path: Path) -> None:
    table = {A: {"tenant": "team-a", "scopes": ["read"]}, B: {"tenant": "team-b"}}
    settings = Settings.from_env({"TANDEM_API_TOKENS": json.dumps(table)})
    assert settings.api_tokens == (A, B)
    assert settings.api.token(A) == ApiToken(A, "team-a", frozenset({"read"}))
    assert settings.api.token(B) == ApiToken(B, "team-b", PLAIN_SCOPES)
    assert settings.api.token("unknown-token-123456") is None
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({READER: {"tenant": "t", "scopes": ["admin"]}}))
    from_file = Settings.from_env({"TANDEM_API_TOKENS": A, "TANDEM_API_TOKENS_FILE": str(path)})
    assert from_file.api_tokens == (A, READER) and from_file.api.token(READER).admin  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        pytest.param('{"x": 1', "starts with '{' but is not valid JSON", id="bad-json"),
        pytest.param('{"short": {}}', "a token of 5 characters", id="short"),
        pytest.param(json.dumps({A: {"tenant": "a b"}}), "token #1 has tenant 'a b'", id="tenant"),
        pytest.param(json.dumps({A: {"scopes": ["write"]}}), "unknown scope 'write'", id="scope"),
        pytest.param(json.dumps({A: {"role": "x"}}), r"unknown key\(s\) \['role'\]", id="key"),
        pytest.param(json.dumps({A: "team-a"}), "maps to str, not an object", id="not-object"),
    ],
)
def test_a_malformed_token_table_is_refused_naming_the_problem_not_the_token(raw: str, match: str) -> None:
    with pytest.raises(SettingsError, match=match) as refused:
        parse_tokens(raw)
    assert A not in str(refused.value)


def test_an_unreadable_tokens_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"TANDEM_API_TOKENS_FILE=.*cannot be read"):
        Settings.from_env({"TANDEM_API_TOKENS_FILE": str(tmp_path / "none.json")})


def test_me_names_the_tokens_tenant_and_scopes(api: Fixture) -> None:
    assert api.client.get("/v1/me", headers=auth(READER)).json() == {
        "tenant": "team-a",
        "scopes": ["read"],
        "admin": False,
    }
    assert api.client.get("/v1/me", headers=auth(ADMIN)).json()["admin"] is True
    assert api.client.get("/v1/me", headers=auth("not-a-token-0123456789")).status_code == 401
