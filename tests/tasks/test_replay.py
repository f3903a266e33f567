"""A signed message is bound to its task id, an expiry and a nonce, and runs once
(``tandem.tasks.replay``; issue 25, item 4)."""

from __future__ import annotations

from typing import Any

import fakeredis
import pytest

from tandem.tasks.replay import SEAL, Replayed, check_seal, seal_message, seen_key

NOW = 1_800_000_000.0


def sealed(task_id: str = "job-1", *, max_age: float = 60, eta: str | None = None) -> dict[str, Any]:
    body: tuple[list[Any], dict[str, Any], dict[str, Any]] = ([], {"spec": {"goal": "g"}}, {"chord": None})
    seal_message(body, {"id": task_id, "eta": eta}, max_age, now=NOW)
    return body[2][SEAL]


def check(seal: Any, task_id: str = "job-1", *, redis: Any, now: float = NOW, **kw: Any) -> None:
    check_seal(seal, task_id, task_id, redis=redis, prefix="tandem", now=now, **kw)


@pytest.fixture
def redis() -> fakeredis.FakeRedis:
    return fakeredis.FakeRedis()


def test_a_sealed_message_runs_once_and_its_nonce_is_remembered_for_the_window(redis: Any) -> None:
    seal = sealed(max_age=60)
    assert seal["id"] == "job-1" and seal["exp"] == NOW + 60
    check(seal, redis=redis)
    key = seen_key("tandem", "job-1", seal["nonce"])
    assert key.startswith("tandem:{job-1}:seen:") and 0 < redis.ttl(key) <= 61
    with pytest.raises(Replayed, match="run before"):
        check(seal, redis=redis, now=NOW + 1)


def test_a_seal_replayed_under_another_task_id_is_refused(redis: Any) -> None:
    with pytest.raises(Replayed, match="signed for task id 'job-1'"):
        check(sealed("job-1"), "job-2", redis=redis)
    assert redis.keys("*") == []  # refused before anything is written


def test_an_expired_seal_is_refused(redis: Any) -> None:
    with pytest.raises(Replayed, match="expired"):
        check(sealed(max_age=60), redis=redis, now=NOW + 61)


def test_a_message_with_an_eta_is_valid_from_its_eta(redis: Any) -> None:
    from datetime import UTC, datetime

    eta = datetime.fromtimestamp(NOW + 300, UTC).isoformat()
    seal = sealed(max_age=60, eta=eta)
    assert seal["exp"] == NOW + 360
    check(seal, redis=redis, now=NOW + 320)


@pytest.mark.parametrize(
    "seal",
    [
        pytest.param(None, id="no-seal"),
        pytest.param("seal", id="not-an-object"),
        pytest.param({"id": "job-1", "nonce": "ab", "exp": NOW + 9}, id="short-nonce"),
        pytest.param({"id": "job-1", "nonce": "{x}" * 4, "exp": NOW + 9}, id="nonce-not-hex"),
        pytest.param({"id": "job-1", "nonce": "a" * 32, "exp": "later"}, id="exp-not-a-number"),
        pytest.param({"id": "job-1", "nonce": "a" * 32}, id="no-exp"),
    ],
)
def test_a_missing_or_malformed_seal_is_refused(seal: Any, redis: Any) -> None:
    with pytest.raises(Replayed):
        check(seal, redis=redis)


def test_a_copy_the_broker_hands_out_again_by_itself_passes(redis: Any) -> None:
    seal = sealed()
    check(seal, redis=redis)
    check(seal, redis=redis, redelivered=True)  # the same task id: every tandem task runs twice safely


def test_a_body_of_another_shape_is_left_alone() -> None:
    body = {"task": "x", "args": []}
    seal_message(body, {"id": "job-1"}, 60)
    assert body == {"task": "x", "args": []}
