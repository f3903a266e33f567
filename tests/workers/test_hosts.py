"""``tandem hosts``: per host in-flight calls, waiting steps, budget use and back-off."""

from __future__ import annotations

import json

import fakeredis

from tandem.broker_config import Settings
from tandem.tasks.hosts.capacity import Grant, HostCapacity, HostLimits
from tandem.workers.hosts import format_hosts, host_snapshots, hosts_json

HOST = "http://gpu-1:8000/v1"


def test_hosts_table_and_json() -> None:
    redis = fakeredis.FakeRedis()
    settings = Settings.from_env(
        {"TANDEM_ACTOR_API_BASE": HOST, "TANDEM_ACTOR_MAX_IN_FLIGHT": "16", "TANDEM_ACTOR_RPM": "100"}
    )
    cap = HostCapacity(redis, settings.prefix, HostLimits(HOST, 16, 100, None, burst_seconds=6))
    grants = [cap.acquire(10) for _ in range(3)]  # of a burst of 10 requests
    assert all(isinstance(g, Grant) for g in grants)
    cap.release(grants[0], success=False, back_off=30)  # a 429 with Retry-After: 30
    table = format_hosts(host_snapshots(redis, settings))
    header, row = table.splitlines()
    assert header.split() == [
        "host",
        "in",
        "flight",
        "waiting",
        "requests/min",
        "tokens/min",
        "back-off",
        "429s",
    ]
    assert row.split()[:6] == [HOST, "2/16", "0", "100/min,", "7/10", "free"]
    assert "s left" in row and row.split()[-1] == "1"
    data = json.loads(hosts_json(host_snapshots(redis, settings)))
    assert data[0]["in_flight"] == 2 and 29 < data[0]["backoff_seconds_left"] <= 30
    # 7 left of the burst, plus what refilled since (1.5 a second: under a second on a slow machine)
    assert data[0]["requests_burst"] == 10 and 7 <= data[0]["requests_available"] < 8


def test_hosts_without_limits_say_how_to_set_them() -> None:
    assert "TANDEM_<ROLE>_MAX_IN_FLIGHT" in format_hosts(host_snapshots(fakeredis.FakeRedis(), Settings()))
