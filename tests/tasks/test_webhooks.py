"""Job webhooks, unit by unit: the signature, where deliveries may go, the settings, the retry
schedule, what a job's record says it is owed, and the outbox's claims on fakeredis and Redis."""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import time
import uuid
from collections.abc import Iterator

import fakeredis
import pytest
from redis import Redis

from tandem.broker_config.errors import SettingsError
from tandem.broker_config.webhook_settings import WebhookSettings
from tandem.tasks.errors import JobSpecError
from tandem.tasks.spec import validate_spec
from tandem.tasks.webhooks.delivery import occasion, retry_delay, schedule_seconds
from tandem.tasks.webhooks.outbox import Claimed, Delivery, WebhookOutbox, delivery_id
from tandem.tasks.webhooks.signing import sign, signature, verify
from tandem.tasks.webhooks.targets import Webhook, check_webhooks, host_allowed, shown_url
from tests.tasks.conftest import real_redis
from tests.tasks.slots import SlotCheckingRedis

SECRET = "whsec-0123456789abcdef"

# -- the signature ------------------------------------------------------------------------------


def test_the_signature_is_the_hmac_of_t_dot_body() -> None:
    body = b'{"event":"final"}'
    expected = hmac.new(SECRET.encode(), b"1764230000." + body, hashlib.sha256).hexdigest()
    assert signature(SECRET, 1764230000, body) == expected
    assert sign(SECRET, body, timestamp=1764230000) == f"t=1764230000,v1={expected}"


@pytest.mark.parametrize(
    ("secret", "body", "age", "ok"),
    [
        pytest.param(SECRET, b'{"a":1}', 0, True, id="good"),
        pytest.param(SECRET, b'{"a":2}', 0, False, id="body-changed"),
        pytest.param("another-secret-0123456", b'{"a":1}', 0, False, id="wrong-secret"),
        pytest.param(SECRET, b'{"a":1}', 301, False, id="too-old"),
        pytest.param(SECRET, b'{"a":1}', -301, False, id="from-the-future"),
    ],
)
def test_verify(secret: str, body: bytes, age: float, ok: bool) -> None:
    header = sign(SECRET, b'{"a":1}', timestamp=1_000_000)
    assert verify(secret, header, body, now=1_000_000 + age) is ok


@pytest.mark.parametrize("header", ["", "t=abc,v1=00", "v1=00", "t=1,t=2,v1=00", "garbage"])
def test_a_malformed_signature_header_does_not_verify(header: str) -> None:
    assert verify(SECRET, header, b"{}", now=1) is False


# -- where deliveries may go ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "allowed", "ok"),
    [
        ("http://127.0.0.1:8080/h", ("loopback",), True),
        ("http://127.5.0.1/h", ("loopback",), True),
        ("http://[::1]:9000/h", ("loopback",), True),
        ("http://localhost/h", ("loopback",), True),
        ("https://hooks.example.com/h", ("loopback",), False),
        ("http://10.0.0.5/h", ("loopback",), False),
        ("https://hooks.example.com/h", ("hooks.example.com",), True),
        ("https://HOOKS.example.com./h", ("hooks.example.com",), True),
        ("https://evil-hooks.example.com/h", ("hooks.example.com",), False),
        ("https://a.b.example.com/h", (".example.com",), True),
        ("https://example.com/h", (".example.com",), True),
        ("https://example.com.evil.io/h", (".example.com",), False),
        ("http://127.0.0.1/h", ("hooks.example.com",), False),
        ("https://anything.io/h", ("*",), True),
    ],
)
def test_host_allowed(url: str, allowed: tuple[str, ...], ok: bool) -> None:
    assert host_allowed(url, allowed) is ok


def test_events_show_a_url_without_credentials_query_or_fragment() -> None:
    assert (
        shown_url("https://user:pw@hooks.example.com:8443/in?token=abc#x")
        == "https://hooks.example.com:8443/in"
    )
    assert shown_url("http://[::1]:9000/h") == "http://[::1]:9000/h"


def test_a_host_outside_the_allow_list_is_refused_naming_the_field_and_the_setting() -> None:
    hooks = [Webhook(url="http://127.0.0.1/a"), Webhook(url="https://hooks.example.com/b")]
    with pytest.raises(JobSpecError) as refused:
        check_webhooks(hooks, WebhookSettings())
    message = str(refused.value)
    assert message.startswith("field 'webhooks.1.url': host 'hooks.example.com' is not allowed")
    assert "TANDEM_WEBHOOK_ALLOWED_HOSTS=loopback,hooks.example.com" in message
    check_webhooks(hooks, WebhookSettings(allowed_hosts=("loopback", "hooks.example.com")))


def test_a_worker_without_a_secret_refuses_webhooks_it_could_not_sign() -> None:
    hooks = [Webhook(url="http://127.0.0.1/a")]
    check_webhooks(hooks, WebhookSettings())  # a submitter does not sign
    with pytest.raises(JobSpecError, match="no TANDEM_WEBHOOK_SECRET"):
        check_webhooks(hooks, WebhookSettings(), signing=True)
    check_webhooks(hooks, WebhookSettings(secret=SECRET), signing=True)
    check_webhooks([], WebhookSettings(), signing=True)


@pytest.mark.parametrize(
    ("hooks", "problem"),
    [
        ([{"url": "ftp://127.0.0.1/x"}], "must start with http:// or https://"),
        ([{"url": "http:///x"}], "names no host"),
        ([{"url": "http://127.0.0.1/x", "events": ["done"]}], "webhooks.0.events.0"),
        ([{"url": "http://127.0.0.1/x", "events": []}], "webhooks.0.events"),
        ([{"url": "http://127.0.0.1/x", "secret": "s"}], "unknown field"),
        ([{"url": "http://127.0.0.1/x"}] * 6, "webhooks"),
    ],
)
def test_a_bad_webhook_entry_is_refused_naming_it(hooks: list[dict[str, object]], problem: str) -> None:
    with pytest.raises(JobSpecError, match="field 'webhooks") as refused:
        validate_spec({"goal": "g", "webhooks": hooks})
    assert problem in str(refused.value)


def test_the_public_spec_shows_no_credentials_of_a_webhook_url() -> None:
    url = "https://ops:pw@127.0.0.1:8443/in?token=abc"
    spec = validate_spec({"goal": "g", "webhooks": [{"url": url}]})
    assert spec.webhooks[0].url == url  # kept whole for the deliveries
    assert spec.public_dump()["webhooks"] == [
        {"url": "https://127.0.0.1:8443/in", "events": ["final", "waiting_for_person"]}
    ]


def test_a_webhook_is_told_of_both_events_by_default() -> None:
    spec = validate_spec({"goal": "g", "webhooks": [{"url": "http://127.0.0.1/x"}]})
    assert spec.webhooks[0].events == ["final", "waiting_for_person"]


# -- settings and schedule ---------------------------------------------------------------------


def test_settings_from_the_environment() -> None:
    default = WebhookSettings.from_env({})
    assert default == WebhookSettings() and default.allowed_hosts == ("loopback",) and default.secret is None
    conf = WebhookSettings.from_env(
        {
            "TANDEM_WEBHOOK_SECRET": SECRET,
            "TANDEM_WEBHOOK_ALLOWED_HOSTS": "loopback, *.Example.com ,hooks.io",
            "TANDEM_WEBHOOK_TIMEOUT": "2.5",
            "TANDEM_WEBHOOK_MAX_ATTEMPTS": "3",
            "TANDEM_WEBHOOK_BACKOFF_SECONDS": "0.5",
        }
    )
    assert conf.allowed_hosts == ("loopback", ".example.com", "hooks.io")
    assert (conf.secret, conf.timeout, conf.max_attempts, conf.backoff) == (SECRET, 2.5, 3, 0.5)
    assert SECRET not in repr(conf)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"TANDEM_WEBHOOK_SECRET": "short"}, "TANDEM_WEBHOOK_SECRET has 5 characters"),
        (
            {"TANDEM_WEBHOOK_ALLOWED_HOSTS": "https://x.io/"},
            "TANDEM_WEBHOOK_ALLOWED_HOSTS holds 'https://x.io/'",
        ),
        ({"TANDEM_WEBHOOK_TIMEOUT": "0"}, "TANDEM_WEBHOOK_TIMEOUT='0'"),
        ({"TANDEM_WEBHOOK_MAX_ATTEMPTS": "many"}, "TANDEM_WEBHOOK_MAX_ATTEMPTS='many'"),
    ],
)
def test_bad_settings_name_the_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError, match=named.replace("(", r"\(")):
        WebhookSettings.from_env(env)


def test_the_retry_delay_doubles_with_jitter_up_to_its_cap() -> None:
    conf = WebhookSettings(backoff=2.0, backoff_max=30.0, max_attempts=4, timeout=5.0)
    rng = random.Random(7)
    for attempt, full in [(1, 2.0), (2, 4.0), (3, 8.0), (4, 16.0), (5, 30.0), (9, 30.0)]:
        delay = retry_delay(conf, attempt, rng)
        assert 0.75 * full <= delay <= full, (attempt, delay)
    assert schedule_seconds(conf) == 2 + 4 + 8 + 4 * 5.0


@pytest.mark.parametrize(
    ("record", "owed"),
    [
        ({"state": "running"}, None),
        ({"state": "waiting"}, None),
        ({"state": "completed"}, ("final", "final:0")),
        ({"state": "failed", "resumes": "2"}, ("final", "final:2")),
        ({"state": "awaiting_approval", "pause_seq": "3"}, ("waiting_for_person", "pause:3")),
        ({"state": "awaiting_answer", "pause_seq": "1"}, ("waiting_for_person", "pause:1")),
        ({}, None),
    ],
)
def test_what_a_record_says_a_job_is_owed(record: dict[str, str], owed: tuple[str, str] | None) -> None:
    assert occasion(record) == owed


# -- the outbox --------------------------------------------------------------------------------


@pytest.fixture(params=["fakeredis", "redis", "slots"])
def outbox(request: pytest.FixtureRequest) -> Iterator[WebhookOutbox]:
    if request.param == "slots":
        redis: Redis = SlotCheckingRedis()
    else:
        redis = fakeredis.FakeRedis() if request.param == "fakeredis" else real_redis()
    prefix = f"test-{uuid.uuid4().hex[:8]}"
    yield WebhookOutbox(redis, prefix)
    for key in redis.scan_iter(match=f"{prefix}:*"):
        redis.delete(key)


def _delivery(job_id: str, occasion: str = "final:0", index: int = 0) -> Delivery:
    did = delivery_id(job_id, occasion, index)
    return Delivery(
        id=did, job_id=job_id, url="http://127.0.0.1/h", event="final", body=json.dumps({"id": did})
    )


def test_a_delivery_id_is_stable_and_tells_occasions_and_webhooks_apart() -> None:
    assert delivery_id("j", "final:0", 0) == delivery_id("j", "final:0", 0)
    ids = {delivery_id("j", o, i) for o in ("final:0", "final:1", "pause:1") for i in (0, 1)}
    assert len(ids) == 6 and delivery_id("k", "final:0", 0) not in ids


def test_planning_twice_writes_one_delivery_and_keeps_its_progress(outbox: WebhookOutbox) -> None:
    d = _delivery("job-1")
    outbox.plan([d], ttl=600, at=time.time() + 5)
    got = outbox.claim("job-1", d.id, lease=30)
    assert isinstance(got, Claimed) and got.attempt == 1 and got.delivery == d
    outbox.plan([d.model_copy(update={"body": "{}"})], ttl=600, at=time.time() + 5)  # the sweeper, later
    [state] = outbox.deliveries("job-1")
    assert (state.delivery.body, state.state, state.attempt) == (d.body, "pending", 1)
    assert outbox.redis.ttl(outbox.key("job-1")) > 0 and outbox.redis.ttl(outbox.shard_key("job-1")) > 0
    assert outbox.due_jobs(int(outbox.shard_key("job-1").rsplit(":", 1)[1]), time.time() + 10, 10) == [
        "job-1"
    ]


def test_an_attempt_holds_the_delivery_and_only_it_reports(outbox: WebhookOutbox) -> None:
    d = _delivery("job-2")
    outbox.plan([d], ttl=600, at=time.time())
    first = outbox.claim("job-2", d.id, lease=30)
    assert isinstance(first, Claimed)
    verdict, _ = outbox.claim("job-2", d.id, lease=30)  # a duplicate message meanwhile
    assert verdict == "busy"
    due = outbox.report("job-2", d.id, 1, "retry", 60.0)
    assert float(due) > time.time() + 50
    assert outbox.claim("job-2", d.id, lease=30)[0] == "early"  # type: ignore[index]
    outbox.report("job-2", d.id, 1, "retry", 0.0)  # settled already: a stale report changes nothing
    assert outbox.claim("job-2", d.id, lease=30)[0] == "early"  # type: ignore[index]


def test_a_lost_attempt_is_fenced_off_by_the_next(outbox: WebhookOutbox) -> None:
    d = _delivery("job-3")
    outbox.plan([d], ttl=600, at=time.time())
    first = outbox.claim("job-3", d.id, lease=0.05)
    time.sleep(0.1)  # its worker died: the lease ran out
    second = outbox.claim("job-3", d.id, lease=30)
    assert isinstance(first, Claimed) and isinstance(second, Claimed) and second.attempt == 2
    assert outbox.report("job-3", d.id, 1, "delivered") == ""  # the first, slow one: fenced off
    assert outbox.report("job-3", d.id, 2, "delivered") == "delivered"
    assert outbox.claim("job-3", d.id, lease=30)[0] == "delivered"  # type: ignore[index]
    [state] = outbox.deliveries("job-3")
    assert (state.state, state.attempt) == ("delivered", 2)


def test_an_unknown_delivery_is_gone(outbox: WebhookOutbox) -> None:
    assert outbox.claim("job-4", "nope", lease=30) == ("gone", 0.0)
