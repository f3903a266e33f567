"""Child jobs over fakeredis: a tool call's ``spawn`` creates its children through the intake
(``WorkerSpawner``), parks the parent (``ChildrenStore``: ``waiting_for_children``), the children's
ends resume it with their outcomes (``resolve``, ``on_job_ended``), a second run creates nothing,
limits refuse with their setting, and the parent's end cancels its children (``cascade``).

The parent of every test is a mono job in round 2 whose Actor reply made 2 calls; call 1 spawns.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import fakeredis
import pytest

from tandem.broker_config import Settings
from tandem.broker_config.child_settings import ChildSettings
from tandem.broker_config.errors import SettingsError
from tandem.reasoner.messages import ModelMessage
from tandem.reasoner.spawning import SPAWN_JOBS
from tandem.reasoner.task import Task
from tandem.tasks import runtime as runtime_module
from tandem.tasks.control import children as children_module
from tandem.tasks.control.children import (
    ChildrenPending,
    ChildrenStore,
    WorkerSpawner,
    cascade,
    child_id,
    children_of,
    on_job_ended,
    resolve,
)
from tandem.tasks.runtime import Runtime
from tandem.tasks.spec import JobResult, JobSpec
from tandem.tasks.state.claims import Claim
from tandem.tasks.state.results import ResultDelivery
from tandem.tasks.steps.guard import end_job
from tandem.toolkit.children import ChildOutcome, ChildSpec
from tandem.toolkit.context import ToolCallContext
from tandem.toolkit.errors import SpawnError

PARENT = "parent-1"
LEASE = 30.0
PARENT_SPEC = JobSpec(
    goal="write the report",
    reasoner="mono",
    owner="team-a",
    tools=["search", "add"],
    max_tokens_total=9000,
    max_cost_usd=0.3,
    priority=7,
)


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """The intake messages sent (job id, spec), instead of a broker."""
    messages: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(
        "tandem.tasks.intake_message.send_intake",
        lambda app, job_id, spec, *a, **k: messages.append((job_id, spec)),
    )
    return messages


@pytest.fixture
def rt(monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    runtime = Runtime(Settings(lease_seconds=2.0, stall_seconds=60.0))
    runtime.__dict__["redis"] = fakeredis.FakeRedis()
    monkeypatch.setattr(runtime_module, "_runtime", runtime)
    monkeypatch.setattr(children_module, "_celery_result", lambda rt, job_id: None)
    monkeypatch.setattr(children_module, "_celery_results", lambda rt, ids: [False] * len(ids))
    runtime.__dict__["delivery"] = ResultDelivery(SimpleNamespace(backend=Backend()), in_script=False)
    yield runtime


class Backend:
    """A stand-in for Celery's result backend (a job's end delivers its result there)."""

    def __init__(self) -> None:
        self.stored: dict[str, str] = {}

    def get_key_for_task(self, job_id: str) -> str:
        return f"celery-task-meta-{job_id}"

    def encode(self, meta: dict[str, Any]) -> str:
        return json.dumps(meta)

    def set(self, key: str, value: str, **_: Any) -> None:
        self.stored[key] = value


ACTOR_REPLY = ModelMessage(role="actor", round=2, content="fan out").model_dump_json()


def start_round(
    rt: Runtime, job_id: str = PARENT, spec: JobSpec = PARENT_SPEC, reply: str = ACTOR_REPLY
) -> Claim:
    """Create the parent, move it to round 2's tool step (2 calls; the Actor's ``reply`` in its
    memory), and claim call 1."""
    machine = rt.machine
    assert machine.create(
        job_id, spec.model_dump_json(), "mono", (2, "actor"), [], timeout=600, ttl_after=600
    )
    claim = machine.claim(job_id, 2, "actor", LEASE, 5)
    assert isinstance(claim, Claim)
    calls = [{"task": "tandem.run_tool", "args": [job_id, 2, i]} for i in (1, 2)]
    assert machine.transition(claim, (2, "tools", 2, ""), calls, [("2:actor", reply)], tx="t")
    call = machine.claim_call(job_id, 2, 1, LEASE, 5)
    assert isinstance(call, Claim)
    return call


def spawn(
    rt: Runtime, n: int = 3, wait: Any = "all", job_id: str = PARENT
) -> ChildrenPending | list[ChildOutcome]:
    """Call 1's ``ctx.spawn`` of ``n`` children on a worker: the outcomes, or the pending wait."""
    ctx = ToolCallContext(job_id=job_id, round=2, call_index=1)
    ctx.bind_spawner(WorkerSpawner(rt, job_id, 2, 1, "fan_out"))
    try:
        return ctx.spawn([{"goal": f"read document {i}"} for i in range(1, n + 1)], wait=wait)
    except ChildrenPending as pending:
        return pending


def end_child(rt: Runtime, cid: str, status: str = "completed", deliverable: str = "") -> JobResult:
    spec = rt.store.spec(cid) or JobSpec.model_validate(json.loads(rt.machine.intake(cid) or "{}"))
    result = rt.store.finish(
        JobResult(
            job_id=cid, status=status, deliverable=deliverable, error=None if status == "completed" else "x"
        )  # type: ignore[arg-type]
    )
    on_job_ended(rt, cid, spec, result)
    return result


def test_child_ids_derive_from_parent_round_call_spawn_and_index() -> None:
    assert child_id("p", 2, 1, 1, 1) == child_id("p", 2, 1, 1, 1)
    ids = {child_id("p", r, c, s, i) for r in (1, 2) for c in (1, 2) for s in (1, 2) for i in (1, 2)}
    assert len(ids) == 16


def test_spawn_creates_children_through_the_intake_once(
    rt: Runtime, sent: list[tuple[str, dict[str, Any]]]
) -> None:
    start_round(rt)
    pending = spawn(rt)
    assert isinstance(pending, ChildrenPending)
    ids = [child_id(PARENT, 2, 1, 1, i) for i in (1, 2, 3)]
    assert pending.children == ids and pending.wait == "all"
    assert [job_id for job_id, _ in sent] == ids
    spec = JobSpec.model_validate(sent[0][1])
    assert (spec.parent_id, spec.owner, spec.reasoner, spec.tools, spec.priority) == (
        PARENT,
        "team-a",
        "mono",
        ["search", "add"],
        7,
    )
    assert spec.max_tokens_total == 3000 and spec.max_cost_usd == pytest.approx(0.1)
    assert spec.timeout_s is not None and 590 < spec.timeout_s <= 600  # the parent's deadline
    assert all(rt.store.status(c).state == "queued" for c in ids)  # type: ignore[union-attr]
    assert children_of(rt, PARENT) == ids
    # The call run again (a lost worker, a replayed step): no child is created twice.
    again = spawn(rt)
    assert isinstance(again, ChildrenPending) and again.children == ids
    assert len(sent) == 3


def test_the_parent_parks_and_resumes_with_the_outcomes(
    rt: Runtime, sent: list[tuple[str, dict[str, Any]]]
) -> None:
    claim = start_round(rt)
    pending = spawn(rt)
    assert isinstance(pending, ChildrenPending)
    store = ChildrenStore(rt.store)
    assert store.park(claim, pending, 600) == "parked"
    rec = rt.machine.record(PARENT)
    assert (rec["state"], rec["pause_kind"], rec["held"]) == ("waiting_for_children", "children", ",1,")
    status = rt.store.status(PARENT)
    assert status is not None and (status.state, status.pause_kind) == ("waiting_for_children", "children")
    verdict = rt.machine.reconcile(PARENT, stall=60.0, max_expiries=5, outbox_grace=1.0)
    assert verdict.action == "children"
    spawned = [e for e in rt.store.read_events(PARENT) if e.type == "children_spawned"]
    assert [e.children for e in spawned] == [pending.children]  # type: ignore[attr-defined]

    first, second, third = pending.children
    end_child(rt, first, deliverable="summary 1")
    end_child(rt, second, status="failed")
    assert rt.machine.record(PARENT)["state"] == "waiting_for_children"  # one still runs
    assert resolve(rt, PARENT) is False
    end_child(rt, third, deliverable="summary 3")
    rec = rt.machine.record(PARENT)
    assert (rec["state"], rec["held"]) == ("running", "")
    ended = [e for e in rt.store.read_events(PARENT) if e.type == "child_ended"]
    assert [(e.child_id, e.status) for e in ended] == [  # type: ignore[attr-defined]
        (first, "completed"),
        (second, "failed"),
        (third, "completed"),
    ]
    # The held call runs again: its spawn returns at once, a child's failure being its outcome.
    outcomes = spawn(rt)
    assert isinstance(outcomes, list)
    assert [(o.job_id, o.status, o.deliverable) for o in outcomes] == [
        (first, "completed", "summary 1"),
        (second, "failed", ""),
        (third, "completed", "summary 3"),
    ]
    assert len(sent) == 3
    assert resolve(rt, PARENT) is False  # resumed once


def test_wait_any_resumes_at_the_first_end(rt: Runtime, sent: list[tuple[str, dict[str, Any]]]) -> None:
    claim = start_round(rt)
    pending = spawn(rt, n=2, wait="any")
    assert isinstance(pending, ChildrenPending)
    assert ChildrenStore(rt.store).park(claim, pending, 600) == "parked"
    end_child(rt, pending.children[1], deliverable="fast")
    assert rt.machine.record(PARENT)["state"] == "running"
    outcomes = spawn(rt, n=2, wait="any")
    assert isinstance(outcomes, list)
    assert [o.status for o in outcomes] == ["queued", "completed"]


def test_the_parents_end_cancels_its_children(rt: Runtime, sent: list[tuple[str, dict[str, Any]]]) -> None:
    claim = start_round(rt)
    pending = spawn(rt)
    assert isinstance(pending, ChildrenPending)
    assert ChildrenStore(rt.store).park(claim, pending, 600) == "parked"
    end_child(rt, pending.children[0], deliverable="done")
    rt.store.request_cancel(PARENT)
    assert rt.machine.reconcile(PARENT, stall=60.0, max_expiries=5, outbox_grace=1.0).action == "cancel"
    result = rt.store.finish(JobResult(job_id=PARENT, status="cancelled", children=pending.children))
    on_job_ended(rt, PARENT, PARENT_SPEC, result)
    assert [rt.store.cancel_requested(c) for c in pending.children] == [False, True, True]
    assert cascade(rt, PARENT) == 2  # safe to run again


def test_depth_and_fanout_limits_refuse_naming_their_setting(
    rt: Runtime, sent: list[tuple[str, dict[str, Any]]]
) -> None:
    rt.settings = replace(rt.settings, children=ChildSettings(max_depth=1, max_fanout=4))
    start_round(rt)
    assert isinstance(spawn(rt, n=3), ChildrenPending)
    spawner = WorkerSpawner(rt, PARENT, 2, 1, "fan_out")
    with pytest.raises(ChildrenPending):  # spawn 1 again: its 3 children are not counted twice...
        spawner([ChildSpec(goal="a")], "all", 1)
    with pytest.raises(SpawnError, match="TANDEM_CHILD_MAX_FANOUT"):  # ...spawn 2's 2 more make 5
        spawner([ChildSpec(goal="b"), ChildSpec(goal="c")], "all", 2)
    child = child_id(PARENT, 2, 1, 1, 1)
    child_spec = JobSpec.model_validate(sent[0][1])
    start_round(rt, child, child_spec)
    with pytest.raises(SpawnError, match="TANDEM_CHILD_MAX_DEPTH"):
        spawn(rt, job_id=child)
    assert len(sent) == 3


def test_a_child_may_not_widen_its_parents_tools(rt: Runtime, sent: list[tuple[str, dict[str, Any]]]) -> None:
    start_round(rt)
    ctx = ToolCallContext(job_id=PARENT, round=2, call_index=1)
    ctx.bind_spawner(WorkerSpawner(rt, PARENT, 2, 1, "fan_out"))
    with pytest.raises(SpawnError, match="only its parent's tools"):
        ctx.spawn([ChildSpec(goal="g", tools=["search", "shell"])])
    assert sent == []


@pytest.mark.parametrize(
    ("specs", "wait", "match"),
    [
        pytest.param([], "all", "non-empty list", id="no-specs"),
        pytest.param("read it", "all", "non-empty list", id="a-string"),
        pytest.param([{"goal": ""}], "all", "child spec 1: field 'goal'", id="empty-goal"),
        pytest.param([{"goal": "g", "shell": 1}], "all", "child spec 1", id="unknown-field"),
        pytest.param(["g"], 2, "from 1 to 1", id="wait-too-many"),
        pytest.param(["g"], "some", 'wait must be "all"', id="wait-word"),
    ],
)
def test_malformed_spawns_are_refused(specs: Any, wait: Any, match: str) -> None:
    ctx = ToolCallContext(job_id="j")
    ctx.bind_spawner(lambda specs, wait, seq: [])
    with pytest.raises(SpawnError, match=match):
        ctx.spawn(specs, wait=wait)


def test_in_process_spawn_says_where_children_run() -> None:
    with pytest.raises(SpawnError, match="run on workers only"):
        ToolCallContext(job_id="j").spawn(["g"])


def test_spawn_jobs_is_offered_to_the_tenants_the_operator_names() -> None:
    settings = ChildSettings.from_env({"TANDEM_SPAWN_TENANTS": "team-a, team-b"})
    assert settings.may_spawn("team-a") and not settings.may_spawn("default")
    assert ChildSettings.from_env({"TANDEM_SPAWN_TENANTS": "*"}).may_spawn("anyone")
    assert not ChildSettings.from_env({}).may_spawn("default")
    assert (ChildSettings.from_env({}).max_depth, ChildSettings.from_env({}).max_fanout) == (3, 100)
    with pytest.raises(SettingsError, match="TANDEM_CHILD_MAX_FANOUT='many'"):
        ChildSettings.from_env({"TANDEM_CHILD_MAX_FANOUT": "many"})
    offered = [t.name for t in Task(goal="g", spawn_jobs=True).recommend()[0]]
    assert SPAWN_JOBS in offered
    assert SPAWN_JOBS not in [t.name for t in Task(goal="g").recommend()[0]]
    assert Settings.from_env({"TANDEM_SPAWN_TENANTS": "team-a"}).children.may_spawn("team-a")


def test_the_model_spawns_through_spawn_jobs() -> None:
    from tandem.reasoner.spawning import spawn_jobs

    seen: list[tuple[list[ChildSpec], Any]] = []

    def spawner(specs: list[ChildSpec], wait: Any, seq: int) -> list[ChildOutcome]:
        seen.append((specs, wait))
        return [
            ChildOutcome(job_id=f"c{i}", status="completed", deliverable=s.goal) for i, s in enumerate(specs)
        ]

    ctx = ToolCallContext(job_id="j").bind_spawner(spawner)
    out = json.loads(spawn_jobs([{"goal": "a"}, {"goal": "b", "reasoner": "react"}], wait="1", context=ctx))
    assert [o["deliverable"] for o in out] == ["a", "b"]
    assert seen[0][1] == 1 and seen[0][0][1].reasoner == "react"


def test_children_records_expire(rt: Runtime, sent: list[tuple[str, dict[str, Any]]]) -> None:
    claim = start_round(rt)
    pending = spawn(rt)
    assert isinstance(pending, ChildrenPending)
    ChildrenStore(rt.store).park(claim, pending, 600)
    for part in ("children", "children_pause"):
        ttl = rt.redis.ttl(rt.store.key(PARENT, part))
        assert ttl > 0, part


def test_a_childs_trace_hangs_under_the_parents_tool_call(
    rt: Runtime, sent: list[tuple[str, dict[str, Any]]], spans: Any
) -> None:
    from tandem.reasoner import tracing

    start_round(rt)
    with tracing.span("execute_tool fan_out", {}) as call:
        assert call is not None
        assert isinstance(spawn(rt, n=2), ChildrenPending)
    trace_id = f"{call.get_span_context().trace_id:032x}"
    for _, spec in sent:
        assert spec["trace_context"]["traceparent"].split("-")[1] == trace_id
    jobs = [s for s in spans.get_finished_spans() if s.name == "tandem.job"]
    assert len(jobs) == 2 and all(s.parent.span_id == call.get_span_context().span_id for s in jobs)
    assert {s.attributes["tandem.parent_id"] for s in jobs} == {PARENT}


def test_a_spec_that_only_names_a_parent_reaches_nothing_of_it(
    rt: Runtime, sent: list[tuple[str, dict[str, Any]]]
) -> None:
    claim = start_round(rt)
    pending = spawn(rt, n=1)
    assert isinstance(pending, ChildrenPending)
    assert ChildrenStore(rt.store).park(claim, pending, 600) == "parked"
    forged = JobSpec(goal="g", parent_id=PARENT)  # submitted by a client, not spawned
    result = rt.store.finish(JobResult(job_id="forged", status="completed"))
    on_job_ended(rt, "forged", forged, result)
    assert [e for e in rt.store.read_events(PARENT) if e.type == "child_ended"] == []
    assert rt.machine.record(PARENT)["state"] == "waiting_for_children"


def test_a_child_starts_in_its_parents_slot_under_a_tenant_cap(
    rt: Runtime, sent: list[tuple[str, dict[str, Any]]]
) -> None:
    """Under a cap of one running job, the parent (holding that slot while it waits) still gets its
    children started, uncounted; a spec that only names the parent waits for its turn."""
    from tandem.broker_config.tenant_settings import TenantPolicy, TenantSettings
    from tandem.tasks.tenants.gate import TenantGate

    gate = TenantGate(rt, TenantSettings(default=TenantPolicy(max_running_jobs=1)))
    assert gate.admit(PARENT, PARENT_SPEC) == "admitted"  # the tenant's one slot
    start_round(rt)
    assert isinstance(spawn(rt, n=2), ChildrenPending)
    for cid, wire in sent:
        assert gate.admit(cid, JobSpec.model_validate(wire)) == "admitted"
    assert gate.queue.running_jobs("team-a") == [PARENT]  # the children are not counted
    forged = PARENT_SPEC.model_copy(update={"parent_id": PARENT})
    assert gate.admit("not-a-child", forged) == "waiting"


def test_a_large_spawn_keeps_its_order_and_sends_no_intake_another_run_sent(
    rt: Runtime, sent: list[tuple[str, dict[str, Any]]]
) -> None:
    start_round(rt)
    ids = [child_id(PARENT, 2, 1, 1, i) for i in range(1, 41)]
    # Another run of the call (a worker that died mid-spawn) created the third child already.
    intake = json.dumps({"goal": "read document 3", "parent_id": PARENT, "owner": "team-a"})
    assert rt.store.mark_queued(ids[2], "mono", intake=intake, owner="team-a")
    pending = spawn(rt, n=40)
    assert isinstance(pending, ChildrenPending) and pending.children == ids
    assert [job_id for job_id, _ in sent] == ids[:2] + ids[3:]  # its intake is that run's
    assert children_of(rt, PARENT) == ids  # in spawn order
    assert all(rt.store.status(c).state == "queued" for c in ids)  # type: ignore[union-attr]
    assert all(int(rt.redis.ttl(rt.store.key(c, "state"))) > 0 for c in ids)
    assert all(rt.machine.intake(c) for c in ids)
    assert spawn(rt, n=40) is not None and len(sent) == 39  # run again: nothing sent twice


def test_a_parked_child_ends_with_its_parent_at_once(
    rt: Runtime, sent: list[tuple[str, dict[str, Any]]]
) -> None:
    claim = start_round(rt)
    pending = spawn(rt, n=2)
    assert isinstance(pending, ChildrenPending)
    assert ChildrenStore(rt.store).park(claim, pending, 600) == "parked"
    parked, busy = pending.children
    # The first child waits for children of its own, holding no worker; the second is queued.
    child_spec = JobSpec.model_validate(sent[0][1])
    reply = json.dumps({"role": "actor", "content": "spawning", "round": 2})
    child_claim = start_round(rt, parked, child_spec, reply)
    grandchildren = spawn(rt, n=2, job_id=parked)
    assert isinstance(grandchildren, ChildrenPending)
    assert ChildrenStore(rt.store).park(child_claim, grandchildren, 600) == "parked"
    rt.store.request_cancel(PARENT)
    result = rt.store.finish(JobResult(job_id=PARENT, status="cancelled", children=pending.children))
    on_job_ended(rt, PARENT, PARENT_SPEC, result, end_job)
    ended = rt.store.result(parked)  # not at a later sweep
    assert ended is not None and ended.status == "cancelled"
    assert f"celery-task-meta-{parked}" in rt.delivery.app.backend.stored
    assert rt.store.result(busy) is None and rt.store.cancel_requested(busy)  # ends at its next step
    assert all(rt.store.cancel_requested(g) for g in grandchildren.children)  # and so on down


def test_a_job_a_client_listed_in_the_children_index_is_counted_and_no_child(
    rt: Runtime, sent: list[tuple[str, dict[str, Any]]]
) -> None:
    """A Redis user with more than the documented client line may write a job's children index
    (the documented one may not: docs/security.md): a job listed there by hand still waits
    for its turn under the cap, and a job of another owner listed there is not in the parent's
    children (result, cascade) and its end reaches nothing of the parent."""
    from tandem.broker_config.tenant_settings import TenantPolicy, TenantSettings
    from tandem.tasks.control.children import children_key, own_children
    from tandem.tasks.tenants.gate import TenantGate

    gate = TenantGate(rt, TenantSettings(default=TenantPolicy(max_running_jobs=1)))
    assert gate.admit(PARENT, PARENT_SPEC) == "admitted"
    start_round(rt)
    assert isinstance(spawn(rt, n=1), ChildrenPending)
    [(child, _)] = sent
    rt.redis.zadd(children_key(rt, PARENT), {"listed": 1.0, "foreign": 2.0})
    listed = PARENT_SPEC.model_copy(update={"parent_id": PARENT})
    assert gate.admit("listed", listed) == "waiting"
    foreign = PARENT_SPEC.model_copy(update={"parent_id": PARENT, "owner": "team-b"})
    rt.store.mark_queued("foreign", "mono", intake=foreign.model_dump_json(), owner="team-b")
    assert sorted(own_children(rt, PARENT, PARENT_SPEC.owner)) == sorted([child, "listed"])
    result = JobResult(job_id="foreign", status="completed", owner="team-b")
    on_job_ended(rt, "foreign", foreign, result)
    assert [e for e in rt.store.read_events(PARENT) if e.type == "child_ended"] == []
