"""A rolling upgrade from the previous release (``previous_release.PREVIOUS_RELEASE``) to this one,
and a rollback, on real ``celery worker`` processes of both releases sharing one Redis (issue 36,
part 6; docs/upgrades.md).

Upgrade: workers of the previous release (every role) run 100 jobs its client submitted, 20 of
them parked for approval; workers of this release start beside them; the old workers stop one role
at a time (a warm shutdown, SIGTERM), this release's client submitting more jobs in between, while
old workers of the other roles still run; the 20 are approved once every old worker is gone.
Rollback: the same the other way, jobs of this release's client in flight (parked ones included)
when the old release's workers take over, and its client approves them.

Every job ends ``completed`` (counted by id), every at-most-once call (``charge_card``, counted in
the tools' side channel ``test:calls``) and every approved call ran exactly once, no worker
exited by itself (each stopped one left on its warm shutdown, exit code 0), and ``tandem
version-check`` lists the versions in flight before and none after.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tandem.client.handle import JobHandle
from tandem.tasks.spec import FINAL_STATES
from tandem.tasks.state.versions import MEMORY_VERSION, SPEC_VERSION
from tandem.workers.embedded import WorkerGroup
from tests.integration import previous_release
from tests.integration.conftest import EVENT_SECONDS, READY_SECONDS, RESULT_SECONDS, Cluster, _make_cluster
from tests.integration.plan_model import goal_with_plan
from tests.integration.previous_release import OldWorkerGroup
from tests.integration.test_durability import wait_for

pytestmark = pytest.mark.integration

ROLES = ("thinker", "actor", "tools")
OLD_JOBS = 100
PARKED = 20
NEW_JOBS_PER_STOP = 10
ROLLBACK_JOBS = 40
ROLLBACK_PARKED = 10
ENV = {"TANDEM_TOOLKIT": "tests.integration.tools:durable_toolkit"}


@pytest.fixture(scope="module")
def old_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return previous_release.extract(tmp_path_factory.mktemp("previous-release"))


@pytest.fixture
def cluster(redis_base: str) -> Iterator[Cluster]:
    gen = _make_cluster(redis_base, **ENV)
    found, _, _ = next(gen)
    yield found
    next(gen, None)


def charging(n: int) -> dict[str, Any]:
    """A job whose first round charges a card (at most once) and whose second adds."""
    plan = [
        [{"name": "charge_card", "args": {"amount": n, "seconds": 0}}],
        [{"name": "add", "args": {"a": n, "b": 1}}],
    ]
    return {"goal": goal_with_plan(f"upgrade {n}", plan), "max_rounds": 6}


def approving(n: int) -> dict[str, Any]:
    """A job that adds, then parks on ``notify`` (a person approves each call), then charges."""
    plan = [
        [{"name": "add", "args": {"a": n, "b": 2}}, {"name": "notify", "args": {"to": f"ops-{n}"}}],
        [{"name": "charge_card", "args": {"amount": n, "seconds": 0}}],
    ]
    return {"goal": goal_with_plan(f"parked {n}", plan), "max_rounds": 6}


def start_old(cluster: Cluster, tree: Path, name: str) -> dict[str, OldWorkerGroup]:
    """One group of the previous release per role, so each stops on its own; all ready."""
    groups = {
        role: OldWorkerGroup(tree, [role], env=cluster.env, loglevel="INFO", name=f"{name}-{role}")
        for role in ROLES
    }
    for group in groups.values():
        group.start()
        cluster.groups.append(group)
    for group in groups.values():
        group.wait_ready(cluster.app, timeout=READY_SECONDS)
    return groups


def start_new(cluster: Cluster, name: str) -> dict[str, WorkerGroup]:
    """One group of this release per role, all ready."""
    return {role: cluster.start(role, name=f"{name}-{role}") for role in ROLES}


def warm_stop(cluster: Cluster, group: WorkerGroup) -> None:
    """SIGTERM (a warm shutdown: the worker finishes or puts back what it holds) and wait for it to
    leave by itself, exit code 0; it then counts as stopped, not as exited."""
    assert cluster.exited() == [], f"workers exited by themselves: {cluster.exited()}"
    for proc in group.processes.values():
        proc.send_signal(signal.SIGTERM)
    for role, proc in group.processes.items():
        code = proc.wait(EVENT_SECONDS)
        assert code == 0, (
            f"the {role} worker of {group.name} left its warm shutdown with {code}: {group.log_dir}"
        )
        cluster.killed.add(proc.pid)


def version_check(cluster: Cluster) -> tuple[int, dict[str, Any]]:
    """``tandem version-check --json`` of this release: its exit code and what it printed."""
    done = subprocess.run(
        [sys.executable, "-m", "tandem.workers.cli", "version-check", "--json"],
        env={**os.environ, **cluster.env},
        capture_output=True,
        text=True,
        timeout=EVENT_SECONDS,
    )
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def states(cluster: Cluster, ids: list[str]) -> list[str]:
    pipe = cluster.redis.pipeline(transaction=False)
    for job_id in ids:
        pipe.hget(cluster.store.key(job_id, "state"), "state")
    return [(s or b"").decode() for s in pipe.execute()]


def handle(cluster: Cluster, job_id: str) -> JobHandle:
    return JobHandle(job_id, cluster.store, cluster.app)


def check_ended(cluster: Cluster, ids: list[str], parked: list[str]) -> None:
    """Every job completed; each at-most-once call and each approved call ran exactly once."""
    ended = {job_id: handle(cluster, job_id).result(timeout=RESULT_SECONDS) for job_id in ids}
    failed = {job_id: (r.status, r.error) for job_id, r in ended.items() if r.status != "completed"}
    assert failed == {}, failed
    assert sorted(ended) == sorted(set(ids)) and len(ids) == len(set(ids))
    calls = cluster.tool_calls()
    charges = Counter((c["job"], c["round"], c["index"]) for c in calls if c["name"] == "charge_card")
    assert [k for k, n in charges.items() if n > 1] == [], "an at-most-once call ran twice"
    assert sorted(job for job, _, _ in charges) == sorted(ids), "each job charges once"
    notified = Counter(c["job"] for c in calls if c["name"] == "notify")
    assert notified == Counter(parked), "each approved call ran once, and only once approved"


def versions(cluster: Cluster, ids: list[str]) -> Counter[tuple[int, int]]:
    """How many of ``ids`` have each (spec, memory) version on their records (0: no field)."""
    pipe = cluster.redis.pipeline(transaction=False)
    for job_id in ids:
        pipe.hmget(cluster.store.key(job_id, "state"), "spec_version", "memory_version")
    return Counter((int(s or 0), int(m or 0)) for s, m in pipe.execute())


def ran_by(cluster: Cluster, groups: dict[str, Any], ids: list[str]) -> int:
    """How many tool calls of ``ids`` the tools worker of ``groups`` ran (the side channel's pid)."""
    pid, jobs = groups["tools"].processes["tools"].pid, set(ids)
    return sum(1 for c in cluster.tool_calls() if c["pid"] == pid and c["job"] in jobs)


def held_calls(cluster: Cluster) -> int:
    """The messages waiting in the tools queue (kombu's lists of it)."""
    lists = [k for k in cluster.redis.scan_iter(match="tools*") if cluster.redis.type(k) == b"list"]
    return sum(cluster.redis.llen(k) for k in lists)


def hold_tools(cluster: Cluster, group: WorkerGroup) -> None:
    """The tools worker of ``group`` stops taking tool calls (Celery's ``cancel_consumer``, which
    both releases answer); it still takes the intake queue."""
    node = group._node("tools")
    replies = cluster.app.control.cancel_consumer("tools", destination=[node], reply=True, timeout=30)
    assert len(replies) == 1, f"{node} did not stop taking the tools queue: {replies}"


def roll(
    cluster: Cluster,
    start_from: Callable[[], dict[str, Any]],
    start_to: Callable[[], dict[str, Any]],
    submit_from: Callable[[list[dict[str, Any]]], list[str]],
    submit_to: Callable[[list[dict[str, Any]]], list[str]],
    approve_to: Callable[[list[str]], None],
    jobs: int,
    parked_jobs: int,
) -> Rolled:
    """Roll the workers from one release to another with ``jobs`` in flight (the first
    ``parked_jobs`` parked for approval by the release rolled from, the others each holding an
    at-most-once call in the tools queue), one role at a time, the release rolled to's client
    submitting between the stops; approve the parked jobs once the old workers are gone and wait
    for every job to end."""
    old = start_from()
    ids = submit_from([approving(n) for n in range(parked_jobs)])
    parked = list(ids)
    wait_for(
        lambda: states(cluster, parked) == ["awaiting_approval"] * parked_jobs,
        RESULT_SECONDS,
        "the release rolled from to park its jobs for approval",
    )
    hold_tools(cluster, old["tools"])
    ids += submit_from([charging(n) for n in range(parked_jobs, jobs)])
    wait_for(
        lambda: held_calls(cluster) >= jobs - parked_jobs,
        RESULT_SECONDS,
        "every running job to wait on its at-most-once call",
    )
    code, before = version_check(cluster)  # before the roll-out, as docs/upgrades.md says
    assert code == 0 and before["ok"], before  # this release reads every job in flight
    in_flight = sum(v["jobs"] for v in before["in_flight"])
    assert in_flight == jobs, before  # every job is live: parked, or waiting on a tool
    new = start_to()
    stops = []
    for role in ROLES:  # one role at a time; the new release's client submits between the stops
        stops.append(sum(s not in FINAL_STATES for s in states(cluster, ids)))
        warm_stop(cluster, old[role])
        ids += submit_to([charging(len(ids) + n) for n in range(NEW_JOBS_PER_STOP)])
    assert set(states(cluster, parked)) == {"awaiting_approval"}  # still parked, untouched
    approve_to(parked)
    check_ended(cluster, ids, parked)
    code, after = version_check(cluster)
    assert code == 0 and after["in_flight"] == [], after
    assert cluster.exited() == []
    return Rolled(ids, parked, before, stops, old, new)


@dataclass
class Rolled:
    ids: list[str]
    parked: list[str]
    before: dict[str, Any]
    stops: list[int]
    """The jobs in flight as each worker of the release rolled from was stopped."""
    old: dict[str, Any]
    """The groups of the release rolled from."""
    new: dict[str, Any]
    """The groups of the release rolled to."""


def test_a_rolling_upgrade_from_the_previous_release_with_jobs_in_flight(
    cluster: Cluster, old_tree: Path
) -> None:
    def approve(ids: list[str]) -> None:
        for job_id in ids:
            handle(cluster, job_id).approve()

    rolled = roll(
        cluster,
        start_from=lambda: start_old(cluster, old_tree, "old"),
        start_to=lambda: start_new(cluster, "new"),
        submit_from=lambda specs: previous_release.submit(old_tree, cluster.env, specs),
        submit_to=lambda specs: [cluster.submit(**spec).id for spec in specs],
        approve_to=approve,
        jobs=OLD_JOBS,
        parked_jobs=PARKED,
    )
    in_flight = {(v["spec_version"], v["memory_version"]): v["jobs"] for v in rolled.before["in_flight"]}
    assert in_flight == {(0, 0): OLD_JOBS}, rolled.before  # the old release's records hold no versions
    # Created and parked by the old release, ended by this one (a claim raised the memory's version).
    assert versions(cluster, rolled.parked) == Counter({(0, MEMORY_VERSION): PARKED})
    held = rolled.ids[PARKED:OLD_JOBS]  # their at-most-once calls, held from the old tools worker
    assert ran_by(cluster, rolled.old, held) == 0 and ran_by(cluster, rolled.new, held) >= len(held)
    print(
        f"upgrade: jobs in flight as each old worker stopped {rolled.stops}; tool calls of this release's "
        f"client's jobs run by the old tools worker: {ran_by(cluster, rolled.old, rolled.ids[OLD_JOBS:])}; "
        f"versions at the end {dict(versions(cluster, rolled.ids))}"
    )


def test_a_rollback_to_the_previous_release_with_jobs_in_flight(cluster: Cluster, old_tree: Path) -> None:
    """docs/upgrades.md: the previous release reads versions 0 and 1 alike, so rolling back from
    this release (jobs it created, parked or took in flight) loses nothing."""
    rolled = roll(
        cluster,
        start_from=lambda: start_new(cluster, "new"),
        start_to=lambda: start_old(cluster, old_tree, "old"),
        submit_from=lambda specs: [cluster.submit(**spec).id for spec in specs],
        submit_to=lambda specs: previous_release.submit(old_tree, cluster.env, specs),
        approve_to=lambda ids: previous_release.approve(old_tree, cluster.env, ids),
        jobs=ROLLBACK_JOBS,
        parked_jobs=ROLLBACK_PARKED,
    )
    in_flight = {(v["spec_version"], v["memory_version"]): v["jobs"] for v in rolled.before["in_flight"]}
    assert in_flight == {(SPEC_VERSION, MEMORY_VERSION): ROLLBACK_JOBS}, (
        rolled.before
    )  # this release's records
    assert versions(cluster, rolled.parked) == Counter(
        {(SPEC_VERSION, MEMORY_VERSION): ROLLBACK_PARKED}
    )  # left as they were
    held = rolled.ids[ROLLBACK_PARKED:ROLLBACK_JOBS]  # their at-most-once calls ran on the old release
    assert ran_by(cluster, rolled.old, held) == 0 and ran_by(cluster, rolled.new, held) >= len(held)
    print(f"rollback: jobs in flight as each new worker stopped {rolled.stops}")
