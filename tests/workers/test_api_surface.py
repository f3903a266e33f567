"""``tandem api``'s HTTP surface: Host allow-list, cross-site refusals, CORS, security headers,
strict JSON bodies and 422s without secrets (Starlette's test client, fakeredis)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tandem.broker_config import Settings
from tandem.broker_config.errors import SettingsError
from tandem.workers.api.headers import CONTENT_SECURITY_POLICY
from tandem.workers.api.host_header import default_hosts, host_allowed, host_name
from tandem.workers.api.origins import same_origin
from tests.workers.test_api import Fixture

SECRET = "sk-live-0123456789abcdef"


@pytest.fixture
def api() -> Fixture:
    return Fixture(max_body=2_000_000)  # room for the deep and the long bodies below


def _queued(api: Fixture) -> str:
    response = api.client.post("/v1/jobs", json={"goal": "g"})
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def _state(api: Fixture, job_id: str) -> str:
    return str(api.client.get(f"/v1/jobs/{job_id}").json()["status"]["state"])


def _one_line_error(response: Any, status: int, code: str | None = None) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    if code is not None:
        assert error["code"] == code, error
    assert "\n" not in error["message"] and error["message"]
    return str(error["message"])


# -- Host allow-list (DNS rebinding) ------------------------------------------------------------------


def test_a_foreign_host_header_gets_400_and_never_the_job_list(api: Fixture) -> None:
    _queued(api)
    rebound = api.client.get("/v1/jobs", headers={"Host": "attacker.example"})
    message = _one_line_error(rebound, 400, "host_not_allowed")
    assert "'attacker.example'" in message and "TANDEM_API_ALLOWED_HOSTS" in message
    assert "jobs" not in rebound.json()
    for host in ("attacker.example:8000", "localhost.attacker.example", "127.0.0.1.nip.io"):
        assert api.client.get("/", headers={"Host": host}).status_code == 400, host
    for host in ("localhost", "localhost:8000", "127.0.0.1:8000", "[::1]:8000", "LOCALHOST."):
        assert api.client.get("/v1/jobs", headers={"Host": host}).status_code == 200, host
    # The probes' documents answer any Host: they hold no job data.
    assert api.client.get("/healthz", headers={"Host": "10.1.2.3:8000"}).status_code == 200
    assert api.client.get("/openapi.json", headers={"Host": "10.1.2.3:8000"}).status_code == 200


def test_allowed_hosts_come_from_the_setting_or_the_bound_address() -> None:
    settings = Settings.from_env({"TANDEM_API_ALLOWED_HOSTS": "api.example.com, *.corp.example"})
    assert settings.api.allowed_hosts == ("api.example.com", ".corp.example")
    fixture = Fixture(api=settings.api, base_url="http://api.example.com")
    with fixture.client as client:
        assert client.get("/").status_code == 200
        assert client.get("/", headers={"Host": "eu.corp.example"}).status_code == 200
        assert (
            client.get("/", headers={"Host": "localhost"}).status_code == 400
        )  # the list replaces the default
    assert default_hosts(None) == ("localhost", "127.0.0.1", "::1")
    assert default_hosts("10.0.0.7") == ("localhost", "127.0.0.1", "::1", "10.0.0.7")
    assert len(default_hosts("0.0.0.0")) > 3  # the machine's own names and addresses
    assert host_name("[::1]:8000") == "::1" and host_name("Example.COM.:80") == "example.com"
    assert host_allowed("a.b.example", [".example"]) and not host_allowed("badexample", [".example"])
    assert host_allowed("anything", ["*"]) and not host_allowed("", ["*"])
    with pytest.raises(SettingsError, match="TANDEM_API_ALLOWED_HOSTS holds 'http://x'"):
        Settings.from_env({"TANDEM_API_ALLOWED_HOSTS": "http://x"})


# -- cross-site requests (CSRF) and CORS ----------------------------------------------------------------


def test_a_cross_site_text_plain_post_does_not_cancel_a_job(api: Fixture) -> None:
    """The token-less loopback API: what a form or a no-preflight fetch from another site sends."""
    job_id = _queued(api)
    attacks = [
        {"Origin": "https://attacker.example", "Content-Type": "text/plain"},
        {"Origin": "null", "Content-Type": "text/plain"},  # sandboxed frame, file://
        {"Origin": "http://localhost:9999", "Content-Type": "text/plain"},  # another port: another origin
        {"Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"},
        {"Sec-Fetch-Site": "same-site", "Content-Type": "application/x-www-form-urlencoded"},
    ]
    for headers in attacks:
        refused = api.client.post(f"/v1/jobs/{job_id}/cancel", content=b"x", headers=headers)
        message = _one_line_error(refused, 403, "cross_site_request")
        assert "may not change anything here" in message
    assert _state(api, job_id) == "queued"
    jobs = len(api.client.get("/v1/jobs").json()["jobs"])
    forged = api.client.post(
        "/v1/jobs", content=b'{"goal": "evil"}', headers={"Origin": "https://attacker.example"}
    )
    assert forged.status_code == 403 and len(api.client.get("/v1/jobs").json()["jobs"]) == jobs


def test_same_origin_and_non_browser_posts_still_work(api: Fixture) -> None:
    job_id = _queued(api)  # no Origin: the CLI, curl, a server
    same = api.client.post(
        f"/v1/jobs/{job_id}/cancel",
        headers={"Origin": "http://localhost", "Sec-Fetch-Site": "same-origin"},
    )
    assert same.status_code == 202 and _state(api, job_id) == "cancelled"
    # Reads from another site are not refused here: without a CORS header the browser hides them.
    read = api.client.get("/v1/jobs", headers={"Origin": "https://attacker.example"})
    assert read.status_code == 200 and "access-control-allow-origin" not in read.headers
    assert same_origin("https://api.example.com", "api.example.com:443")
    assert same_origin("http://localhost:8000", "localhost:8000")
    assert not same_origin("http://localhost:8001", "localhost:8000")
    assert not same_origin("null", "localhost")


def test_cors_is_off_by_default_and_on_for_listed_origins() -> None:
    app_origin = "https://app.example.com"
    preflight = {"Origin": app_origin, "Access-Control-Request-Method": "POST"}
    closed = Fixture()
    refused = closed.client.options("/v1/jobs", headers=preflight)
    assert refused.status_code == 403 and "access-control-allow-origin" not in refused.headers
    assert "TANDEM_API_CORS_ORIGINS" in refused.json()["error"]["message"]

    settings = Settings.from_env(
        {"TANDEM_API_CORS_ORIGINS": "https://app.example.com/, http://localhost:5173"}
    )
    assert settings.api.cors_origins == (app_origin, "http://localhost:5173")
    fixture = Fixture(api=settings.api)
    answered = fixture.client.options(
        "/v1/jobs", headers={**preflight, "Access-Control-Request-Headers": "authorization,content-type"}
    )
    assert answered.status_code == 204
    assert answered.headers["access-control-allow-origin"] == app_origin
    assert "POST" in answered.headers["access-control-allow-methods"]
    assert "Authorization" in answered.headers["access-control-allow-headers"]
    created = fixture.client.post("/v1/jobs", json={"goal": "g"}, headers={"Origin": app_origin})
    assert created.status_code == 202 and created.headers["access-control-allow-origin"] == app_origin
    assert "Location" in created.headers["access-control-expose-headers"]
    assert "origin" in created.headers["vary"].lower()
    other = fixture.client.post("/v1/jobs", json={"goal": "g"}, headers={"Origin": "https://evil.example"})
    assert other.status_code == 403 and "access-control-allow-origin" not in other.headers
    with pytest.raises(SettingsError, match="TANDEM_API_CORS_ORIGINS holds '\\*'"):
        Settings.from_env({"TANDEM_API_CORS_ORIGINS": "*"})


# -- security headers ---------------------------------------------------------------------------------


def test_the_console_and_every_answer_carry_the_security_headers(api: Fixture) -> None:
    for path in ("/", "/console.js", "/console.css", "/v1/jobs", "/healthz", "/v1/jobs/nope"):
        headers = api.client.get(path).headers
        assert headers["content-security-policy"] == CONTENT_SECURITY_POLICY, path
        assert headers["x-frame-options"] == "DENY"
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["referrer-policy"] == "no-referrer"
    assert "frame-ancestors 'none'" in CONTENT_SECURITY_POLICY
    assert "script-src 'self';" in CONTENT_SECURITY_POLICY and "unsafe-inline" not in CONTENT_SECURITY_POLICY
    refused = api.client.get("/", headers={"Host": "attacker.example"})  # refusals too
    assert refused.headers["x-frame-options"] == "DENY"
    page = api.client.get("/").text
    # The console needs no inline script, style or handler: the policy allows none.
    assert re.findall(r"<script[^>]*>", page) == ['<script src="console.js">']
    assert not re.search(r"<[^>]*\s(on[a-z]+|style)=", page) and "<style" not in page


# -- malformed JSON: always a one-line 4xx ------------------------------------------------------------------

MALFORMED = [
    pytest.param(b'{"goal": "g", "threshold": NaN}', "NaN", id="nan"),
    pytest.param(b'{"goal": "g", "threshold": Infinity}', "Infinity", id="infinity"),
    pytest.param(b'{"goal": "g", "threshold": -Infinity}', "-Infinity", id="minus-infinity"),
    pytest.param(b'{"goal": "g", "threshold": 1e999}', "too large", id="overflowing-float"),
    pytest.param(b'{"goal": "g", "max_rounds": ' + b"9" * 5000 + b"}", "digits", id="huge-integer"),
    pytest.param(b'{"goal": "\\ud800"}', "lone surrogate", id="lone-surrogate"),
    pytest.param(b'{"goal": "x", "context": "\\udfff tail"}', "lone surrogate", id="lone-low-surrogate"),
    pytest.param(b'{"\\ud83d": "g"}', "lone surrogate", id="surrogate-in-key"),
    pytest.param(b"[" * 100_000 + b"]" * 100_000, "nests deeper", id="nested-100000"),
    pytest.param(
        b'{"goal": "g", "metadata": ' + b"[" * 500 + b"]" * 500 + b"}", "nests deeper", id="nested-500"
    ),
    pytest.param(b'{"goal": "caf\xe9"}', "not UTF-8", id="latin-1-bytes"),
    pytest.param(b"\xff\xfe{\x00}\x00", "not UTF-8", id="utf-16"),
    pytest.param(b"", "empty", id="empty"),
    pytest.param(b"   \n", "empty", id="blank"),
    pytest.param(b"{goal", "not valid JSON", id="broken"),
    pytest.param(b'{"goal": "g"} trailing', "not valid JSON", id="trailing-data"),
    pytest.param(b'\xef\xbb\xbf{"goal": "g"}', "not valid JSON", id="byte-order-mark"),
]


PATHS = ["/v1/jobs", "/v1/jobs/{id}/decisions", "/v1/jobs/{id}/resume", "/v1/jobs/{id}/fork"]
CASES = [
    pytest.param(path, *case.values, id=f"{path.split('/')[-1]}-{case.id}")
    for path in PATHS
    for case in MALFORMED
    # An empty body asks resume for no change of budget: it is not malformed there.
    if not (path.endswith("/resume") and not bytes(case.values[0]).strip())  # type: ignore[call-overload]
]


@pytest.mark.parametrize(("path", "body", "said"), CASES)
def test_malformed_json_is_a_one_line_400(api: Fixture, path: str, body: bytes, said: str) -> None:
    job_id = _queued(api)
    response = api.client.post(
        path.format(id=job_id), content=body, headers={"Content-Type": "application/json"}
    )
    message = _one_line_error(response, 400)
    assert said in message, message
    assert response.json()["error"]["code"] in ("invalid_json", "empty_body")
    assert len(api.client.get("/v1/jobs").json()["jobs"]) == 1


@pytest.mark.parametrize(
    ("body", "path"),
    [
        pytest.param(b"[]", "/v1/jobs", id="list-spec"),
        pytest.param(b'"goal"', "/v1/jobs", id="string-spec"),
        pytest.param(b"null", "/v1/jobs", id="null-spec"),
        pytest.param(b"42", "/v1/jobs", id="number-spec"),
        pytest.param(b"[1]", "/v1/jobs/{id}/decisions", id="list-decisions"),
        pytest.param(b'"x"', "/v1/jobs/{id}/resume", id="string-resume"),
        pytest.param(b"[]", "/v1/jobs/{id}/fork", id="list-fork"),
    ],
)
def test_a_body_that_is_not_an_object_is_a_422(api: Fixture, body: bytes, path: str) -> None:
    job_id = _queued(api)
    response = api.client.post(
        path.format(id=job_id), content=body, headers={"Content-Type": "application/json"}
    )
    _one_line_error(response, 422)


# -- 422s never echo a secret -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({"goal": "g", "secrets": {"bad name!": SECRET}}, id="bad-secret-name"),
        pytest.param({"goal": "g", "secrets": {"token": [SECRET]}}, id="secret-not-a-string"),
        pytest.param({"goal": "g", "secrets": SECRET}, id="secrets-not-an-object"),
        pytest.param({"goal": "g", "secrets": {"token": SECRET * 400}}, id="secret-too-long"),
        pytest.param({"goal": "", "secrets": {"token": SECRET}}, id="other-field-bad"),
        pytest.param({"secrets": {"token": SECRET}}, id="missing-goal"),
        pytest.param(
            {"goal": SECRET, "secrets": {"token": SECRET}, "max_rounds": 0}, id="secret-copied-in-goal"
        ),
        pytest.param(
            {"goal": "g", "secrets": {"token": SECRET}, "metadata": {"k": SECRET}, "hops": -1},
            id="copied-in-metadata",
        ),
        pytest.param(
            {"goal": "g", "secrets": {f"s{i}": f"{SECRET}{i}" for i in range(40)}},
            id="over-the-secrets-limit",
        ),
    ],
)
def test_a_422_never_echoes_a_secret(api: Fixture, spec: dict[str, Any]) -> None:
    response = api.client.post("/v1/jobs", json=spec)
    assert response.status_code == 422, response.text
    assert SECRET not in response.text and SECRET[:12] not in json.dumps(response.json())
    assert response.json()["error"]["code"] == "invalid_spec"


def test_a_422_still_names_the_field_and_masks_only_secrets(api: Fixture) -> None:
    response = api.client.post("/v1/jobs", json={"goal": "g", "hops": -1, "secrets": {"k": [SECRET]}})
    fields = {f["field"]: f for f in response.json()["error"]["fields"]}
    assert fields["hops"]["input"] == -1
    assert fields["secrets.k"]["input"] == "***"
