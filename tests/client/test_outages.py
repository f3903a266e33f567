"""``tandem.client.outages``: the reconnect window of a client call, and the words of a lost job."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from tandem.client.outages import Reconnect, lost_error, redis_address, restart_note
from tandem.tasks.errors import JobError, JobLostError, RedisUnavailable


class Clock:
    """A fake monotonic clock that the fake ``sleep`` moves on."""

    def __init__(self) -> None:
        self.now = 100.0
        self.pauses: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.pauses.append(round(seconds, 3))
        self.now += seconds


def failing(times: int, error: Exception | None = None) -> Any:
    """A call that fails ``times`` times for want of Redis, then answers ``"ok"``."""
    left = [times]

    def call() -> str:
        if left[0] > 0:
            left[0] -= 1
            raise error or RedisConnectionError("Error 111 connecting to 127.0.0.1:6390. Connection refused.")
        return "ok"

    return call


def reconnect(clock: Clock, window: float = 10.0, deadline: float | None = None) -> Reconnect:
    return Reconnect(
        "127.0.0.1:6390/0", window=window, deadline=deadline, sleep=clock.sleep, clock=lambda: clock.now
    )


def test_a_call_is_repeated_through_an_outage_with_growing_pauses() -> None:
    clock = Clock()
    assert reconnect(clock).call(failing(7)) == "ok"
    assert clock.pauses == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]


def test_timeouts_count_as_an_outage_too() -> None:
    clock = Clock()
    assert reconnect(clock).call(failing(2, RedisTimeoutError("Timeout reading from socket"))) == "ok"


def test_the_window_ends_with_an_error_that_says_where_how_long_and_what_to_check() -> None:
    clock = Clock()
    with pytest.raises(RedisUnavailable) as caught:
        reconnect(clock, window=5.0).call(failing(1000))
    message = str(caught.value)
    assert message.startswith(
        "Redis at 127.0.0.1:6390/0 could not be reached for 5 s (the 5 s reconnect window is over); "
        "last error: Error 111 connecting to 127.0.0.1:6390. Connection refused. "
    )
    assert "Connection refused" in message and "may still be running" in message
    assert "TANDEM_REDIS_URL" in message
    assert sum(clock.pauses) == pytest.approx(5.0)  # the last pause ends at the window, not past it
    # Callers that caught redis's ConnectionError (or tandem's JobError) still do.
    assert isinstance(caught.value, RedisConnectionError) and isinstance(caught.value, JobError)


def test_the_outage_counts_from_the_start_of_the_try_that_failed() -> None:
    clock = Clock()

    def slow_refusal() -> str:  # redis-py's own retries take seconds before it raises
        clock.now += 4.0
        raise RedisConnectionError("Error 111 connecting to 127.0.0.1:6390. Connection refused.")

    with pytest.raises(RedisUnavailable, match=r"for 8 s \(the 5 s reconnect window is over\)"):
        reconnect(clock, window=5.0).call(slow_refusal)
    assert clock.pauses == [0.1]  # 4 s of the window were gone at the first failure


def test_a_deadline_bounds_the_outage_however_long_the_window() -> None:
    clock = Clock()
    with pytest.raises(RedisUnavailable, match=r"for 3 s \(the wait's timeout is over\)"):
        reconnect(clock, window=300.0, deadline=clock.now + 3).call(failing(1000))
    assert sum(clock.pauses) == pytest.approx(3.0)


def test_a_success_ends_the_outage_so_the_next_one_has_a_whole_window() -> None:
    clock = Clock()
    calls = reconnect(clock, window=2.0)
    assert calls.call(failing(4)) == "ok"  # 1.5 s of pauses: within 2 s
    assert calls.call(failing(4)) == "ok"  # a new outage of 1.5 s, not 3 s since the first


def test_an_inner_calls_given_up_window_is_not_repeated() -> None:
    clock = Clock()

    def inner() -> str:
        raise RedisUnavailable("Redis at x could not be reached for 15 s")

    with pytest.raises(RedisUnavailable, match="15 s"):
        reconnect(clock).call(inner)
    assert clock.pauses == []


def test_other_errors_are_not_repeated() -> None:
    clock = Clock()

    def wrong() -> str:
        raise ValueError("not an outage")

    with pytest.raises(ValueError, match="not an outage"):
        reconnect(clock).call(wrong)
    assert clock.pauses == []


def test_acall_repeats_a_coroutine_function() -> None:
    clock = Clock()
    call = failing(2)

    async def fn() -> str:
        return str(call())

    assert asyncio.run(reconnect(clock).acall(fn)) == "ok"


def test_recover_waits_for_the_probe() -> None:
    clock = Clock()
    probe = failing(3)
    reconnect(clock).recover(RedisConnectionError("reset by peer"), probe)
    assert clock.pauses == [0.1, 0.2, 0.4, 0.8]  # the failure that broke the read, then 3 probes


def test_the_address_never_shows_credentials() -> None:
    assert redis_address(Redis.from_url("redis://user:s3cret@db.example:6390/4")) == "db.example:6390/4"
    assert redis_address(Redis.from_url("unix:///run/redis.sock?db=2")) == "unix:/run/redis.sock/2"


@pytest.mark.parametrize(
    ("info", "known_for", "expected"),
    [
        pytest.param(
            {"uptime_in_seconds": 12, "aof_enabled": 0},
            300.0,
            r"Redis restarted 12 s ago, after the job was submitted or seen \(300 s ago\), without "
            r"persistence \(appendonly no\).*Submit it again; run Redis with --appendonly yes",
            id="restart-without-persistence",
        ),
        pytest.param(
            {"uptime_in_seconds": 12, "aof_enabled": 1},
            300.0,
            r"Redis restarted 12 s ago.*with append-only persistence, yet without the job's keys",
            id="restart-with-aof",
        ),
        pytest.param(
            {"uptime_in_seconds": 86400, "aof_enabled": 0},
            300.0,
            r"its keys expired \(TANDEM_MEMORY_TTL\) or were deleted. Submit it again$",
            id="no-restart-since",
        ),
        pytest.param(
            None,
            300.0,
            r"expired \(TANDEM_MEMORY_TTL\), were deleted, or a restart erased them \(Redis's INFO",
            id="info-refused",
        ),
    ],
)
def test_a_lost_job_is_explained(info: dict[str, Any] | None, known_for: float, expected: str) -> None:
    error = lost_error("job-1", info, known_for)
    assert isinstance(error, JobLostError)
    assert str(error).startswith("job 'job-1' is lost: ")
    assert re.search(expected, str(error)), str(error)


def test_an_unknown_id_notes_a_recent_restart_without_persistence() -> None:
    assert restart_note({"uptime_in_seconds": 40, "aof_enabled": 0}, 86400) == (
        " (note: Redis runs without persistence (appendonly no) and restarted 40 s ago: a job "
        "submitted before then was erased)"
    )
    assert restart_note({"uptime_in_seconds": 40, "aof_enabled": 1}, 86400) == ""
    assert restart_note({"uptime_in_seconds": 90000, "aof_enabled": 0}, 86400) == ""
    assert restart_note(None, 86400) == ""
