"""``tandem version-check``: the live jobs by format version, and its exit status, over fakeredis."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest

from tandem.broker_config import Settings
from tandem.tasks import runtime as runtime_module
from tandem.tasks.state.versions import MEMORY_VERSION, SPEC_VERSION
from tandem.workers import cli, exit_codes, reach


@pytest.fixture
def rt(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    runtime = runtime_module.Runtime(Settings.from_env({}))
    runtime.__dict__["redis"] = fakeredis.FakeRedis()
    monkeypatch.setattr(reach, "preflight", lambda settings, broker=True: None)
    monkeypatch.setattr(runtime_module, "_runtime", runtime)
    yield runtime


def live_job(rt: Any, job_id: str) -> None:
    outbox = [{"task": "tandem.thinker_turn", "args": [job_id, 0]}]
    assert rt.machine.create(
        job_id, '{"goal": "g"}', "dual", (0, "thinker"), outbox, timeout=600, ttl_after=60
    )
    rt.machine.index(job_id, 0.0, 600)


def test_every_live_job_read_by_this_release_exits_0(rt: Any, capsys: pytest.CaptureFixture[str]) -> None:
    live_job(rt, "a")
    live_job(rt, "b")
    rt.redis.hdel(rt.store.key("b", "state"), "spec_version", "memory_version")  # from before versions
    assert cli.main(["version-check"]) == exit_codes.OK
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        f"this release reads spec v0-v{SPEC_VERSION}, memory v0-v{MEMORY_VERSION} and writes "
        f"spec v{SPEC_VERSION}, memory v{MEMORY_VERSION}"
    )
    assert [line.split()[:3] for line in out[2:]] == [
        ["v0", "v0", "1"],
        [f"v{SPEC_VERSION}", f"v{MEMORY_VERSION}", "1"],
    ]
    assert not any(line.startswith("what to do") for line in out)


def test_a_job_of_a_newer_release_exits_1_saying_what_to_do(
    rt: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    live_job(rt, "a")
    rt.redis.hset(rt.store.key("a", "state"), "memory_version", MEMORY_VERSION + 1)
    assert cli.main(["version-check"]) == exit_codes.JOB_FAILED
    out = capsys.readouterr().out
    assert "what to do: 1 live job(s) were written or taken by a newer release" in out

    assert cli.main(["version-check", "--json"]) == exit_codes.JOB_FAILED
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False
    assert data["in_flight"] == [
        {"spec_version": SPEC_VERSION, "memory_version": MEMORY_VERSION + 1, "jobs": 1, "fit": "newer"}
    ]


def test_no_live_job_says_so(rt: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["version-check", "--json"]) == exit_codes.OK
    data = json.loads(capsys.readouterr().out)
    assert (data["ok"], data["in_flight"], data["advice"]) == (True, [], [])
