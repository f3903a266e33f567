"""A client's cancel reaches a parked parent's running children at once (docs/children.md,
Waiting, cancelling, the deadline): ``JobHandle.cancel`` flags the job and every child it started,
so each child ends at its own next step, and the parked parent ends at the sweep the cancel wakes.

The workers here sweep once every 450 s on their own (``TANDEM_LEASE_SECONDS`` and
``TANDEM_STALL_SECONDS`` of 3600): no regular sweep ends the parent or a child during the test, so
whatever ends within ``EVENT_SECONDS`` of the cancel was ended by the cancel (its flags, its wake).
Whether the parent hears a child's end (``child_ended``) depends on which comes first, the child's
next step or the woken sweep; either way it hears each end at most once, and only as cancelled.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, _make_cluster
from tests.integration.test_children import ENDLESS, spawned_children, submit
from tests.integration.test_durability import wait_for
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]
NO_SWEEP = {"TANDEM_STALL_SECONDS": "3600", "TANDEM_LEASE_SECONDS": "3600"}


@pytest.fixture(scope="module")
def cluster(redis_base: str) -> Iterator[Hosts]:
    clusters = _make_cluster(
        redis_base, TANDEM_TOOLKIT="tests.integration.children_tools:toolkit", **NO_SWEEP
    )
    hosts = next(clusters)
    hosts[0].start("thinker", "actor", "tools", concurrency={"tools": 4})
    yield hosts
    next(clusters, None)


def round_of(c: Cluster, job_id: str) -> int:
    raw = c.redis.hget(c.store.key(job_id, "state"), "round")
    return int(float(raw)) if raw else 0


def test_a_cancel_ends_a_parked_parents_running_children_at_their_next_step(cluster: Hosts) -> None:
    c, _, _ = cluster
    handle = submit(c, "fan_out", goals=[ENDLESS] * 4, max_rounds=400, endless=True)
    wait_for(lambda: handle.status().state == "waiting_for_children", EVENT_SECONDS, "the parent to park")
    children = spawned_children(c, handle.id)
    assert len(children) == 4, children
    try:
        wait_for(lambda: all(round_of(c, x) >= 2 for x in children), EVENT_SECONDS, "the children to run")
    finally:
        handle.cancel()
    at_cancel = {x: round_of(c, x) for x in children}  # every step claimed from now on ends the child
    wait_for(
        lambda: all(c.store.result(x) is not None for x in children), EVENT_SECONDS, "the children to end"
    )
    ended = {x: c.store.result(x) for x in children}
    assert {x: r.status for x, r in ended.items() if r is not None} == dict.fromkeys(children, "cancelled")
    for x in children:  # no step started after the cancel: at most the step under way committed
        record = c.redis.hgetall(c.store.key(x, "state"))
        assert record[b"state"] == b"cancelled"
        assert round_of(c, x) <= at_cancel[x] + 1, (x, at_cancel[x], round_of(c, x))
    wait_for(lambda: c.store.result(handle.id) is not None, EVENT_SECONDS, "the parked parent to end")
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "cancelled" and result.children == children
    heard = [(e.child_id, e.status) for e in c.store.read_events(handle.id) if e.type == "child_ended"]  # type: ignore[attr-defined]
    assert len(heard) == len(set(heard)) and set(heard) <= {(x, "cancelled") for x in children}, heard
