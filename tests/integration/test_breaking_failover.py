"""Breaking tests of what docs/durability.md ("A Redis failover"), docs/high-availability.md
(Sentinel URLs, ``TANDEM_REDIS_WAIT_REPLICAS``) and docs/upgrades.md (versions, hand-back,
``tandem version-check``) promise, written from the docs alone, on real processes.

One Sentinel group per module (a primary, a replica, three Sentinels: ``tests.integration.
redis_sentinel``), all three URLs ``redis+sentinel://``, ``TANDEM_REDIS_WAIT_REPLICAS=1`` with a
500 ms timeout, leases of 2 s. The test tools record their calls in a database of the shared plain
Redis, which no fault here touches. The test that fails the primary over runs last (the group's
topology is then another).
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from tandem.client.submission import submit
from tandem.tasks.state.store import JobStore
from tandem.tasks.state.versions import MEMORY_VERSION, SPEC_VERSION
from tandem.workers.embedded import WorkerGroup
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, _cluster_on, _exclusive_db
from tests.integration.plan_model import goal_with_plan
from tests.integration.redis_sentinel import OwnSentinelGroup
from tests.integration.test_durability import runs, wait_for
from tests.integration.test_redis_sentinel import FAST, own_group

pytestmark = pytest.mark.integration

TIMEOUT_MS = 500
ONE_CHARGE = [[{"name": "charge_card", "args": {"amount": 5, "seconds": 0}}]]
PLAIN = [[{"name": "add", "args": {"a": 2, "b": 3}}]]
NEWER = SPEC_VERSION + 1
"""The format versions of a release newer than this one (spec and memory)."""
NEWER_RELEASE = f"""\
import os

if os.environ.get("TEST_NEWER_RELEASE") == "1":
    from tandem.tasks.state import machine, versions

    newer = versions.SupportedVersions(versions.SUPPORTED.oldest, versions.JobVersions({NEWER}, {NEWER}))
    versions.SPEC_VERSION = versions.MEMORY_VERSION = {NEWER}
    versions.SUPPORTED = machine.SUPPORTED = newer
    machine.JobMachine.__init__.__defaults__ = (newer,)
"""
"""A ``sitecustomize`` that makes a worker process one of a release reading and writing spec and
memory v{NEWER} (and every older version this one reads), as a rolled-out worker would."""


@pytest.fixture(scope="module")
def group(redis_base: str) -> Iterator[OwnSentinelGroup]:
    started = own_group()
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def cluster(redis_base: str, group: OwnSentinelGroup) -> Iterator[Cluster]:
    """Thinker, actor and tools workers on the group's Sentinel URL, waiting for 1 replica."""
    with _exclusive_db() as db:
        plain = f"{redis_base}/{db}"
        Redis.from_url(plain).flushdb()
        gen = _cluster_on(
            group.url(0),
            TEST_CALLS_REDIS_URL=plain,
            TANDEM_TOOLKIT="tests.integration.tools:durable_toolkit",
            TANDEM_REDIS_WAIT_REPLICAS="1",
            TANDEM_REDIS_WAIT_TIMEOUT_MS=str(TIMEOUT_MS),
            **FAST,
        )
        built, _, _ = next(gen)
        try:
            built.start("thinker", "actor", "tools", name="waits")
            yield built
        finally:
            next(gen, None)  # stops the workers, checks every key's TTL on the master of the moment
            Redis.from_url(plain).flushdb()


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``tandem <args>`` as a user runs it, with ``env``'s settings."""
    return subprocess.run(
        [sys.executable, "-m", "tandem.workers.cli", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=EVENT_SECONDS,
    )


def logs(groups: list[WorkerGroup]) -> str:
    return "".join(
        (g.log_dir / f"{role}.log").read_text(errors="replace") for g in groups for role in g.processes
    )


def replica_of(group: OwnSentinelGroup) -> int:
    """The port of the data node that is not the master of the moment."""
    master = wait_for(group.agreed_master, EVENT_SECONDS, "an agreed master")
    return group.replica_port if master == group.primary_port else group.primary_port


def test_a_cli_command_on_a_service_the_sentinels_do_not_know_names_the_setting(
    cluster: Cluster, group: OwnSentinelGroup
) -> None:
    """high-availability.md: a URL tandem cannot use stops the process at start with one line
    naming the variable, the part that is wrong and the value. A misspelt service is a setting to
    fix (exit 2), not a Redis to start (exit 3)."""
    wrong = group.url(0).replace("/svc/", "/svc-typo/")
    for command in (["version-check"], ["status", "some-job"]):
        done = cli(
            {"TANDEM_BROKER_URL": wrong, "TANDEM_REDIS_URL": wrong, "TANDEM_RESULT_BACKEND": wrong}, *command
        )
        said = done.stderr.strip().splitlines()
        assert done.returncode == 2, (command, done.returncode, done.stderr)
        assert len(said) == 1 and "TANDEM_" in said[0], said
        assert "monitor no master named 'svc-typo'" in said[0] and "['svc']" in said[0], said
        assert "start redis-server" not in said[0], said


def test_a_lagging_replica_puts_off_the_at_most_once_call_and_lets_the_rest_through(
    cluster: Cluster, group: OwnSentinelGroup, caplog: pytest.LogCaptureFixture
) -> None:
    """high-availability.md, "Commits that survive a promotion": with the replica SIGSTOPped every
    wait times out. The submission returns all the same (a WARNING naming it); the ``at_most_once``
    call does not run, its reason in the job's ``last_error``, the job ``running``, no lease expiry
    counted; a job without such a call ends all the same. Once the replica is back, the call runs
    once."""
    replica = replica_of(group)
    caplog.set_level(logging.WARNING, logger="tandem.redis")
    group.pause(replica)
    try:
        store = JobStore.from_settings(cluster.redis, cluster.settings)  # as ``submit`` builds it
        held = submit(
            dict(goal=goal_with_plan("lagging replica", ONE_CHARGE), max_rounds=4),
            app=cluster.app,
            store=store,
        )
        plain = submit(
            dict(goal=goal_with_plan("no side effect", PLAIN), max_rounds=4), app=cluster.app, store=store
        )
        short = [r.getMessage() for r in caplog.records if "replicas within" in r.getMessage()]
        assert any(
            held.id in m and f"acknowledged by 0 of 1 replicas within {TIMEOUT_MS} ms" in m for m in short
        ), short

        def put_off() -> bool:
            return "the tool did not run" in cluster.store.machine.record(held.id).get("last_error", "")

        wait_for(put_off, EVENT_SECONDS, "the at_most_once call to be put off")
        state = cluster.store.machine.record(held.id)
        assert state["state"] == "running", state
        assert int(state.get("expiries") or 0) == 0, state
        assert (
            f"the start mark of at_most_once call 1 of round 0 reached 0 of 1 replicas within {TIMEOUT_MS} ms"
            in state["last_error"]
        ), state["last_error"]
        assert runs(cluster, held.id, "charge_card") == []
        warned = re.compile(
            rf"job {re.escape(held.id)}: the start mark of call 1 of round 0 was acknowledged by 0 of 1 "
            rf"replicas within {TIMEOUT_MS} ms \(TANDEM_REDIS_WAIT_REPLICAS\); a failover now could lose it"
        )
        wait_for(lambda: warned.search(logs(cluster.groups)), EVENT_SECONDS, "the short wait's WARNING")

        # A job's end under a short wait: it has ended all the same.
        assert plain.result(timeout=RESULT_SECONDS).status == "completed"
        ended = re.compile(rf"job {re.escape(plain.id)}: the end was acknowledged by 0 of 1 replicas")
        # the result is readable while the end's WAIT still runs: its WARNING comes after it
        wait_for(lambda: ended.search(logs(cluster.groups)), EVENT_SECONDS, "the end's short wait's WARNING")
        assert runs(cluster, held.id, "charge_card") == []
    finally:
        group.resume(replica)
    assert held.result(timeout=RESULT_SECONDS).status == "completed"
    assert [(c["round"], c["index"]) for c in runs(cluster, held.id, "charge_card")] == [(0, 1)]


def test_a_job_of_a_newer_release_is_handed_back_counted_and_run_by_a_newer_worker(
    cluster: Cluster, tmp_path: Path
) -> None:
    """upgrades.md: a worker hands back a job whose versions it does not read (the record and the
    events untouched, never failed, one log line); ``tandem version-check`` counts it as newer and
    exits 1 with a ``what to do:`` line; a worker of the newer release runs it to its end, raising
    its ``memory_version`` to its own; then ``version-check`` exits 0."""
    handle = cluster.submit(goal=goal_with_plan("from the future", PLAIN + PLAIN), max_rounds=5)
    state_key = cluster.store.key(handle.id, "state")
    wait_for(
        lambda: cluster.store.machine.record(handle.id).get("state") == "running", EVENT_SECONDS, "the job"
    )
    cluster.redis.hset(state_key, "spec_version", NEWER)  # as a newer release's resume stored it
    formats = f"spec v{NEWER}, memory v{MEMORY_VERSION}"
    told = f"job {handle.id}: its formats ({formats}) are newer than this worker reads"
    wait_for(lambda: told in logs(cluster.groups), EVENT_SECONDS, "the hand-back's line")
    ignored = re.compile(rf"Task tandem\.\w+\[{re.escape(handle.id)}[^\]]*\] ignored")
    seen = len(ignored.findall(logs(cluster.groups)))
    record = cluster.store.machine.record(handle.id)
    events = cluster.redis.xrange(cluster.store.key(handle.id, "events"))
    wait_for(lambda: len(ignored.findall(logs(cluster.groups))) > seen, EVENT_SECONDS, "another hand-back")
    assert cluster.store.machine.record(handle.id) == record
    assert cluster.redis.xrange(cluster.store.key(handle.id, "events")) == events
    assert record["state"] == "running", record
    assert logs(cluster.groups).count(told) == 1  # one line per job, not per hand-back

    checked = cli(cluster.env, "version-check")
    assert checked.returncode == 1, checked
    rows = checked.stdout.splitlines()
    reads = f"spec v0-v{SPEC_VERSION}, memory v0-v{MEMORY_VERSION}"
    writes = f"spec v{SPEC_VERSION}, memory v{MEMORY_VERSION}"
    assert rows[0] == f"this release reads {reads} and writes {writes}", rows
    assert (
        f"v{NEWER}    v{MEMORY_VERSION}      1     newer than this release reads: "
        "only a worker of a newer release runs them" in rows
    ), rows
    assert (
        [r for r in rows if r.startswith("what to do: ")]
        == [
            r
            for r in rows
            if r.startswith("what to do: 1 live job(s) were written or taken by a newer release")
        ]
        != []
    ), rows
    data = json.loads(cli(cluster.env, "version-check", "--json").stdout)
    assert data["in_flight"] == [
        {"spec_version": NEWER, "memory_version": MEMORY_VERSION, "jobs": 1, "fit": "newer"}
    ], data
    assert data["ok"] is False and len(data["advice"]) == 1, data

    newer = tmp_path / "newer-release"
    newer.mkdir()
    (newer / "sitecustomize.py").write_text(NEWER_RELEASE)
    path = os.pathsep.join(p for p in (str(newer), os.environ.get("PYTHONPATH", "")) if p)
    rolled = cluster.start("thinker", "actor", "tools", name="newer", PYTHONPATH=path, TEST_NEWER_RELEASE="1")
    try:
        result = handle.result(timeout=RESULT_SECONDS)
        assert result.status == "completed", result
        assert cluster.store.machine.record(handle.id)["memory_version"] == str(NEWER)
        assert [c["round"] for c in runs(cluster, handle.id, "add")] == [0, 1]
    finally:
        cluster.stop_group(rolled)
    after = cli(cluster.env, "version-check")
    assert (after.returncode, after.stdout.splitlines()[1:]) == (0, ["no live job"]), after
