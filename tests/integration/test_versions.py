"""Versions on real ``celery worker`` processes (issue 36, part 5): a step of a job whose record was
written by a newer release goes back to its queue, again and again, while the job stays exactly as
it was (record, events) and no worker exits; once the record is one the workers read, the message
they kept handing back runs the job to its end.

``TANDEM_STALL_SECONDS`` is an hour here, so no reconciler sends the step again: only the message
handed back can end the job.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tandem.tasks.state.versions import MEMORY_VERSION, SPEC_VERSION
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, _make_cluster
from tests.integration.plan_model import goal_with_plan

pytestmark = pytest.mark.integration


def wait_for(what: Callable[[], Any], message: str, timeout: float = EVENT_SECONDS) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := what()):
        assert time.monotonic() < deadline, f"timed out: {message}"
        time.sleep(0.1)
    return found


def _log(cluster: Cluster, role: str) -> str:
    return "".join(
        (g.log_dir / f"{role}.log").read_text(errors="replace") for g in cluster.groups if role in g.processes
    )


@pytest.fixture
def quiet_reconciler(redis_base: str) -> Iterator[Cluster]:
    gen = _make_cluster(redis_base, TANDEM_STALL_SECONDS="3600")
    cluster, _, _ = next(gen)
    yield cluster
    next(gen, None)


def test_a_newer_jobs_step_goes_back_to_its_queue_untouched_until_a_worker_reads_it(
    quiet_reconciler: Cluster,
) -> None:
    cluster = quiet_reconciler
    cluster.start("tools")  # takes the intake; no worker takes the thinker queue yet
    handle = cluster.submit(goal=goal_with_plan("versions", [[{"name": "add", "args": {"a": 2, "b": 3}}]]))
    machine = cluster.store.machine
    wait_for(
        lambda: (
            machine.record(handle.id).get("kind") == "thinker" and machine.record(handle.id)["outbox"] == "[]"
        ),
        "the intake created the record and sent the first step",
    )
    state_key = cluster.store.key(handle.id, "state")
    cluster.redis.hset(state_key, "spec_version", SPEC_VERSION + 1)  # as a newer release wrote it
    record = machine.record(handle.id)
    events = cluster.redis.xrange(cluster.store.key(handle.id, "events"))

    cluster.start("thinker", "actor")
    received = re.compile(rf"Task tandem\.thinker_turn\[{re.escape(handle.id)}\.0\.[0-9a-f]+\] received")
    ignored = re.compile(rf"Task tandem\.thinker_turn\[{re.escape(handle.id)}\.0\.[0-9a-f]+\] ignored")
    wait_for(
        lambda: (
            len(ignored.findall(_log(cluster, "thinker"))) >= 3
            and len(received.findall(_log(cluster, "thinker"))) >= 4
        ),
        "the thinker worker left the step's message three times and took its copy a fourth time",
    )
    assert machine.record(handle.id) == record  # no claim, epoch, progress or expiry moved
    assert cluster.redis.xrange(cluster.store.key(handle.id, "events")) == events  # nothing published
    told = [line for line in _log(cluster, "thinker").splitlines() if "newer than this worker reads" in line]
    assert len(told) == 1 and handle.id in told[0], told  # one line per job, not per hand-back
    assert f"spec v{SPEC_VERSION + 1}, memory v{MEMORY_VERSION}" in told[0]
    assert cluster.exited() == []

    cluster.redis.hset(state_key, "spec_version", SPEC_VERSION)  # now a record these workers read
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    assert result.deliverable == "all planned calls ran"
    assert [c["name"] for c in cluster.tool_calls() if c["job"] == handle.id] == ["add"]
