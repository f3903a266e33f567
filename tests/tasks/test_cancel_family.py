"""A client's cancel reaches the job's whole family at once (``JobStore.request_cancel`` over
``tandem.tasks.state.family``), over fakeredis: every child the job started, down the tree, is
flagged and looked at now; a job listed in a children index that the parent did not start is
left alone; the walk is bounded and safe to run twice; a child spawned after the walk is still
cancelled by the workers' cascade at the parent's end."""

from __future__ import annotations

import json
import time
from typing import Any

from tandem.tasks.control.children import ChildrenPending, ChildrenStore, children_key, on_job_ended
from tandem.tasks.runtime import Runtime
from tandem.tasks.spec import JobResult, JobSpec
from tandem.tasks.state.family import descendants
from tandem.tasks.state.keys import live_shard_key, live_shard_of
from tandem.tasks.steps.guard import end_job
from tests.tasks import test_children
from tests.tasks.test_children import PARENT, PARENT_SPEC, end_child, spawn, start_round

rt = test_children.rt
sent = test_children.sent


def family(rt: Runtime, sent: list[tuple[str, dict[str, Any]]]) -> tuple[list[str], list[str], list[str]]:
    """The parent parked on 3 children; child 1 parked on 2 grandchildren; child 3 ended."""
    claim = start_round(rt)
    pending = spawn(rt, n=3)
    assert isinstance(pending, ChildrenPending)
    assert ChildrenStore(rt.store).park(claim, pending, 600) == "parked"
    first = pending.children[0]
    reply = json.dumps({"role": "actor", "content": "spawning", "round": 2})
    child_claim = start_round(rt, first, JobSpec.model_validate(sent[0][1]), reply)
    grand = spawn(rt, n=2, job_id=first)
    assert isinstance(grand, ChildrenPending)
    assert ChildrenStore(rt.store).park(child_claim, grand, 600) == "parked"
    end_child(rt, pending.children[2])
    return pending.children, grand.children, [pending.children[2]]


def next_look(rt: Runtime, job_id: str) -> float | None:
    return rt.redis.zscore(live_shard_key(rt.settings.prefix, live_shard_of(job_id)), job_id)


def test_a_cancel_flags_every_child_the_job_started_down_the_tree(
    rt: Runtime, sent: list[tuple[str, dict[str, Any]]]
) -> None:
    children, grandchildren, ended = family(rt, sent)
    live = [c for c in children if c not in ended]
    for job_id in [PARENT, *live, *grandchildren]:
        rt.redis.zadd(live_shard_key(rt.settings.prefix, live_shard_of(job_id)), {job_id: time.time() + 3600})
    flagged = rt.store.request_cancel(PARENT)
    assert flagged == [*live, *grandchildren]  # parents before their children; the ended one not
    assert all(rt.store.cancel_requested(j) for j in [PARENT, *live, *grandchildren])
    assert not rt.store.cancel_requested(ended[0])
    assert all((next_look(rt, j) or 0) <= time.time() for j in [PARENT, *live, *grandchildren])
    # Parked itself, child 1 ends at the next sweep, not after its parent's end.
    assert rt.machine.reconcile(children[0], stall=60.0, max_expiries=5, outbox_grace=1.0).action == "cancel"
    assert rt.store.request_cancel(PARENT) == flagged  # safe to run again
    assert rt.redis.ttl(rt.store.key(grandchildren[0], "cancel")) > 0


def test_a_cancel_leaves_alone_a_listed_job_its_parent_did_not_start(
    rt: Runtime, sent: list[tuple[str, dict[str, Any]]]
) -> None:
    children, grandchildren, _ended = family(rt, sent)
    other_owner = PARENT_SPEC.model_copy(update={"parent_id": PARENT, "owner": "team-b"})
    other_parent = PARENT_SPEC.model_copy(update={"parent_id": "someone-else"})
    rt.redis.set(rt.store.key("theirs", "spec"), other_owner.model_dump_json())
    rt.redis.set(rt.store.key("elsewhere", "intake"), other_parent.model_dump_json())
    rt.redis.zadd(children_key(rt, PARENT), {"theirs": 1.0, "elsewhere": 2.0, "nothing-stored": 3.0})
    flagged = rt.store.request_cancel(PARENT)
    assert not {"theirs", "elsewhere", "nothing-stored"} & set(flagged)
    assert not any(rt.store.cancel_requested(j) for j in ("theirs", "elsewhere", "nothing-stored"))
    assert set(grandchildren) <= set(flagged) and children[0] in flagged


def test_the_walk_is_bounded_in_depth_and_size(rt: Runtime, sent: list[tuple[str, dict[str, Any]]]) -> None:
    children, _grandchildren, _ended = family(rt, sent)
    assert descendants(rt.store, PARENT, "team-a", max_depth=1) == children[:2]
    assert descendants(rt.store, PARENT, "team-a", max_jobs=1) == children[:1]
    assert descendants(rt.store, PARENT, "team-b") == []  # only the job owner's children
    assert rt.store.request_cancel("no-such-job") == []


def test_a_child_spawned_after_the_cancel_is_cancelled_by_the_parents_end(
    rt: Runtime, sent: list[tuple[str, dict[str, Any]]]
) -> None:
    claim = start_round(rt)
    assert rt.store.request_cancel(PARENT) == []  # the cancel reads the index before the spawn
    pending = spawn(rt, n=2)
    assert isinstance(pending, ChildrenPending)
    assert ChildrenStore(rt.store).park(claim, pending, 600) == "parked"
    assert not any(rt.store.cancel_requested(c) for c in pending.children)
    result = rt.store.finish(JobResult(job_id=PARENT, status="cancelled", children=pending.children))
    on_job_ended(rt, PARENT, PARENT_SPEC, result, end_job)  # the workers' cascade: the backstop
    assert all(rt.store.cancel_requested(c) for c in pending.children)
