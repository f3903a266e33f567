"""Child jobs on workers: starting them from a tool call, parking the parent, resuming it, cascading.

A tool calls ``ToolCallContext.spawn(specs, wait)`` (the built-in ``spawn_jobs`` too). On a worker
the call's context spawns through a ``WorkerSpawner``, which works like the question asker
(``tandem.tasks.control.questions``) and shares its scripts:

- the outcomes stored for this spawn are returned at once (the call's second run, below);
- otherwise each child is created through the normal intake (``create_child``: the job is marked
  ``queued``, indexed, and ``tandem.infer`` is sent with the child's id, as ``tandem.submit``
  does), and ``ChildrenPending`` unwinds the tool up to ``run_tool``, which parks the job with
  ``ChildrenStore.park``: state ``waiting_for_children``, ``pause_kind`` ``children``, the call
  held, no worker held and no task queued. Unlike a question, the wait does not move the
  deadline: the parent's deadline bounds its children's.

A child's id derives from (parent, round, call index, spawn number in the call, child index)
(``child_id``), and creating it is a no-op once it exists: a call run again (a lost worker, the
resume after the wait) creates no child twice.

When a child ends (``on_job_ended``, called by every end of a job), the parent gets a
``child_ended`` event and its wait is checked (``resolve``): once ``all`` / ``any`` / ``n``
children have ended, the children's outcomes are stored as the pause's answer (``answer.lua``: the
call goes back to the outbox, the job runs again) and the call **runs again from the start**; its
``spawn`` returns the outcomes. The reconciler checks the wait too, for an end that was not heard.

When the parent ends (completed, failed, cancelled, past its deadline), every child still running
is cancelled (``cascade``), recursively through their own ends. A child's failure is its outcome
in the parent's tool result, never the parent's failure.

Budget: each child's ``timeout_s`` is the time left to the parent's deadline, its budgets what is
left of the parent's divided among the children of that spawn, and an ended child's spend counts
as the parent's (``tandem.tasks.control.spend``). Tracing: docs/children.md.

Keys: ``{prefix}:{<job>}:children`` (a sorted set of the job's child ids by creation time; the
job's TTL) and ``{prefix}:{<job>}:children_pause`` (the pause record, like a question's).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from celery.exceptions import Ignore
from pydantic import Field
from redis.cluster import RedisCluster

from tandem.broker_config.tokens import DEFAULT_TENANT
from tandem.reasoner import tracing
from tandem.reasoner.ttl_writes import zadd_with_ttl
from tandem.tasks.control.once import Repeated
from tandem.tasks.control.questions import QuestionPending, QuestionRecord, QuestionStore
from tandem.tasks.control.spend import budget_left, outcome_of
from tandem.tasks.errors import DecisionRefused
from tandem.tasks.job_events import ChildEnded, ChildrenSpawned
from tandem.tasks.spec import FINAL_STATES, JobResult, JobSpec
from tandem.tasks.tenants.queue import mark_spawned
from tandem.tasks.tracing import job_span
from tandem.toolkit.children import ChildOutcome, ChildSpec, Wait
from tandem.toolkit.context import Question
from tandem.toolkit.errors import SpawnError

if TYPE_CHECKING:
    from tandem.tasks.runtime import Runtime
    from tandem.tasks.state.claims import Claim

__all__ = [
    "ChildrenPending",
    "ChildrenRecord",
    "ChildrenStore",
    "WorkerSpawner",
    "cascade",
    "child_id",
    "children_of",
    "on_job_ended",
    "resolve",
]

log = logging.getLogger("tandem.tasks")

CHILD_NAMESPACE = uuid.UUID("6f1d2c0e-5b7a-4e8e-9a51-3c2f7d9e4b10")
"""The UUID namespace of child job ids (``child_id``)."""


def child_id(parent_id: str, round_no: int, call_index: int, spawn: int, index: int) -> str:
    """The id of child ``index`` (from 1) of spawn ``spawn`` (from 1) of call ``call_index`` of
    ``round_no`` of job ``parent_id``: a UUID 5, the same every time."""
    return str(uuid.uuid5(CHILD_NAMESPACE, f"{parent_id}:{round_no}:{call_index}:{spawn}:{index}"))


class ChildrenRecord(QuestionRecord):
    """The wait of a parent for its children: their ids and the wait condition."""

    children: list[str] = Field(default_factory=list)
    wait: str | int = "all"


class ChildrenPending(QuestionPending):
    """Raised by ``WorkerSpawner`` once the children exist and have not met the wait: ``run_tool``
    parks the job (``ChildrenStore.park``)."""

    def __init__(self, question: Question, tool: str, children: list[str], wait: Wait) -> None:
        super().__init__(question, tool)
        self.children = children
        self.wait = wait


class ChildrenStore(QuestionStore):
    """The parent's wait for its children, parked and resumed by the question scripts."""

    state = "waiting_for_children"
    kind = "children"
    part = "children_pause"
    field_kind = "children"
    record_type = ChildrenRecord
    moves_deadline = False

    def record_of(self, claim: Claim, asked: QuestionPending, timeout_s: float) -> QuestionRecord:
        children = asked.children if isinstance(asked, ChildrenPending) else []
        wait = asked.wait if isinstance(asked, ChildrenPending) else "all"
        return ChildrenRecord(
            job_id=claim.job_id,
            round=claim.round,
            call_index=claim.index,
            tool=asked.tool,
            text=f"waiting for {len(children)} child jobs ({wait})",
            ask_seq=asked.question.seq,
            asked_at=time.time(),
            timeout_s=timeout_s,
            children=children,
            wait=wait,
        )

    def parked(self, job_id: str, record: QuestionRecord) -> None:
        assert isinstance(record, ChildrenRecord)
        spawned = ChildrenSpawned(
            round=record.round, call_index=record.call_index, children=record.children, wait=str(record.wait)
        )
        self.store.publish(job_id, spawned)

    def answered(self, job_id: str, updated: QuestionRecord, late: bool) -> None:
        """Nothing to publish: each child's end was published (``child_ended``)."""

    def resume(self, record: ChildrenRecord, outcomes: list[ChildOutcome]) -> None:
        """Store ``outcomes`` as the answer of ``record``'s pause (``answer.lua``: the held call
        goes back to the outbox, the job runs); ``DecisionRefused`` or ``Repeated`` when the
        pause has ended (resumed by another process first, or the job ended)."""
        answer = [o.model_dump(mode="json") for o in outcomes]
        self._store(record.job_id, answer, record.pause_id, "", None)


def children_key(rt: Runtime, job_id: str) -> str:
    """The Redis key of the sorted set of ``job_id``'s children."""
    return rt.store.key(job_id, "children")


def children_of(rt: Runtime, job_id: str) -> list[str]:
    """The ids of the children ``job_id`` started, oldest first."""
    return [_text(c) for c in rt.redis.zrange(children_key(rt, job_id), 0, -1)]


def own_children(rt: Runtime, job_id: str, owner: str) -> list[str]:
    """The ids in ``job_id``'s children index that are children it started (not ``foreign``: a
    Redis user with more than the documented client line may write the index, so a job of another
    owner listed there is left out)."""
    return [cid for cid in children_of(rt, job_id) if not foreign(rt, cid, job_id, owner)]


def depth_of(rt: Runtime, spec: JobSpec) -> int:
    """How deep ``spec``'s job nests: 0 for a job a client submitted, its parent's depth + 1 else."""
    depth, parent = 0, spec.parent_id
    while parent is not None and depth <= rt.settings.children.max_depth + 1:
        depth += 1
        above = rt.store.spec(parent)
        parent = above.parent_id if above is not None else None
    return depth


def outcomes_of(rt: Runtime, ids: list[str]) -> list[ChildOutcome]:
    """Where each child of ``ids`` stands: its ``JobResult`` once ended (also a refusal at intake,
    which only Celery's result holds), else its state. One round trip for all (each job's keys
    are in its own cluster slot, so a pipeline, not a transaction)."""
    pipe = rt.redis.pipeline(transaction=False)
    for cid in ids:
        pipe.get(rt.store.key(cid, "result"))
        pipe.hget(rt.store.key(cid, "state"), "state")
    replies = pipe.execute() if ids else []
    outcomes = []
    for n, cid in enumerate(ids):
        raw, state = replies[2 * n], replies[2 * n + 1]
        result = JobResult.model_validate_json(raw) if raw is not None else None
        if result is None and state is not None and _text(state) not in FINAL_STATES:
            outcomes.append(ChildOutcome(job_id=cid, status=_text(state)))
            continue
        result = result or _celery_result(rt, cid)
        if result is None:
            outcomes.append(ChildOutcome(job_id=cid, status="queued"))
            continue
        outcomes.append(outcome_of(cid, result))  # its usage with it: the parent's spend
    return outcomes


def _celery_result(rt: Runtime, job_id: str) -> JobResult | None:
    from tandem.tasks.app import app

    with contextlib.suppress(Exception):
        meta = app.backend.get_task_meta(job_id)
        if meta.get("status") == "SUCCESS" and isinstance(meta.get("result"), dict):
            return JobResult.model_validate(meta["result"])
    return None


def wait_holds(wait: str | int, outcomes: list[ChildOutcome]) -> bool:
    """Whether ``wait`` holds for ``outcomes``: all ended, any ended, or at least ``wait`` ended."""
    ended = sum(o.ended for o in outcomes)
    need = len(outcomes) if wait == "all" else 1 if wait == "any" else int(wait)
    return ended >= min(need, len(outcomes))


class WorkerSpawner:
    """``ToolCallContext.spawn`` on a worker: the stored outcomes, or the children created and
    ``ChildrenPending``."""

    def __init__(self, rt: Runtime, job_id: str, round_no: int, index: int, tool: str) -> None:
        self.rt = rt
        self.job_id = job_id
        self.round = round_no
        self.index = index
        self.tool = tool
        self.used = False  # whether the call spawned: only then is its children's spend read

    def __call__(self, specs: list[ChildSpec], wait: Wait, seq: int) -> list[ChildOutcome]:
        self.used = True
        raw = self.rt.redis.hget(self.rt.store.key(self.job_id, "calls"), f"{self.index}:children:{seq}")
        if raw is not None:
            stored = json.loads(raw)
            if stored.get("by") == "timeout":
                raise SpawnError("the child jobs did not meet their wait before the job's deadline")
            return [ChildOutcome.model_validate(o) for o in stored.get("answer") or []]
        parent = self.rt.store.spec(self.job_id)
        if parent is None:
            raise SpawnError(f"job {self.job_id!r} is not known any more; no child job was started")
        ids = [child_id(self.job_id, self.round, self.index, seq, n) for n in range(1, len(specs) + 1)]
        self.check_limits(parent, ids)
        deadline = float(self.rt.machine.record(self.job_id).get("deadline") or 0)
        left = deadline - time.time() if deadline else None
        if left is not None and left <= 1:
            raise SpawnError("the job's deadline is past or too close: no child job was started")
        taken = [cid for cid in _stored(self.rt, ids) if foreign(self.rt, cid, self.job_id, parent.owner)]
        if taken:
            raise SpawnError(taken_refusal(taken))
        create_children(self.rt, self.job_id, budget_left(self.rt, self.job_id, parent), ids, specs, left)
        question = Question(text=f"{len(ids)} child jobs", round=self.round, call_index=self.index, seq=seq)
        raise ChildrenPending(question, self.tool, ids, wait)

    def check_limits(self, parent: JobSpec, ids: list[str]) -> None:
        """``SpawnError`` naming the limit and its setting when the children would nest too deep
        or the job would start too many (children started already are not counted twice)."""
        limits = self.rt.settings.children
        depth = depth_of(self.rt, parent) + 1
        if depth > limits.max_depth:
            raise SpawnError(
                f"child jobs may nest {limits.max_depth} deep (TANDEM_CHILD_MAX_DEPTH) and this job is "
                f"at depth {depth - 1}: no child job was started; do the work in this job"
            )
        known = set(children_of(self.rt, self.job_id))
        total = len(known | set(ids))
        if total > limits.max_fanout:
            raise SpawnError(
                f"a job may start {limits.max_fanout} child jobs in all (TANDEM_CHILD_MAX_FANOUT); "
                f"this spawn would make {total}: no child job was started; start fewer"
            )


def child_spec(
    parent_id: str, parent: JobSpec, spec: ChildSpec, siblings: int, left: float | None
) -> JobSpec:
    """The ``JobSpec`` of a child: its own goal, the parent's owner, secrets, priority, tools
    (a child may narrow them, never widen) and reasoner unless it names its own, the time left to
    the parent's deadline and its share of the parent's budget."""
    if spec.tools is not None and parent.tools is not None:
        wider = sorted(set(spec.tools) - set(parent.tools))
        if wider:
            raise SpawnError(f"a child may use only its parent's tools; not allowed here: {wider}")
    share = max(siblings, 1)
    return JobSpec(
        goal=spec.goal,
        context=spec.context,
        reasoner=spec.reasoner or parent.reasoner,
        tools=spec.tools if spec.tools is not None else parent.tools,
        actions=list(parent.actions),
        max_rounds=spec.max_rounds or parent.max_rounds,
        owner=parent.owner,
        secrets=dict(parent.secrets),
        priority=parent.priority,
        parent_id=parent_id,
        timeout_s=max(left, 1.0) if left is not None else None,
        max_tokens_total=max(parent.max_tokens_total // share, 1) if parent.max_tokens_total else None,
        max_cost_usd=parent.max_cost_usd / share if parent.max_cost_usd else None,
    )


def create_child(
    rt: Runtime,
    parent_id: str,
    parent: JobSpec,
    cid: str,
    spec: ChildSpec,
    siblings: int,
    left: float | None,
) -> bool:
    """Create child ``cid`` through the normal intake, once: ``True`` when this call created it.
    It is added to the parent's children first (the cascade finds it even if this worker dies
    next); an existing child (record or result) is left alone."""
    from tandem.tasks.app import app
    from tandem.tasks.intake_message import send_intake

    job_spec = child_spec(parent_id, parent, spec, siblings, left)
    if tracing.STATE.on:  # the child's trace hangs under the parent's tool call: one trace
        attrs = {"tandem.reasoner": job_spec.reasoner, "tandem.parent_id": parent_id}
        job_spec = job_spec.model_copy(update={"trace_context": job_span(cid, attrs)})
    wire = job_spec.model_dump(mode="json")
    _list_children(rt, parent_id, {cid: time.time()})
    if rt.machine.record(cid) or rt.store.result(cid) is not None or _celery_result(rt, cid) is not None:
        _refuse_if_foreign(rt, cid, parent_id, parent.owner)
        return False
    timeout = float(wire["timeout_s"] or rt.settings.job_timeout)
    mark_spawned(rt.redis, rt.settings.prefix, cid, time.time() + timeout + rt.store.ttl)
    rt.machine.index(cid, time.time() + rt.settings.stall_seconds, int(timeout + rt.store.ttl))
    if not rt.store.mark_queued(cid, wire["reasoner"], intake=json.dumps(wire), owner=parent.owner):
        _refuse_if_foreign(rt, cid, parent_id, parent.owner)
        return False  # another run of this call created it just now
    try:
        send_intake(app, cid, wire)
    except Exception:  # stored and indexed: the reconciler sends its intake message again
        log.warning("child job %s of %s: its intake message was not sent now", cid, parent_id, exc_info=True)
    return True


def create_children(
    rt: Runtime, parent_id: str, parent: JobSpec, ids: list[str], specs: list[ChildSpec], left: float | None
) -> list[str]:
    """Create the children ``ids`` (of ``specs``) through the normal intake, each once, in a few
    round trips whatever their number; the ids this call created. As ``create_child``, one by one:
    all are added to the parent's children first (one pipeline), those with neither a record nor
    a result are indexed and marked ``queued`` (one ``MULTI``: a record another run wrote first is
    left alone, and that child's intake is not sent here), then their intake messages are sent.

    On a Redis Cluster (the jobs' keys are in many slots) or with replica waits
    (``TANDEM_REDIS_WAIT_REPLICAS``: each submission waits on its own), the children are marked
    one by one (``create_child``)."""
    from tandem.tasks.app import app
    from tandem.tasks.intake_message import send_intake

    wires = [
        _child_wire(parent_id, parent, cid, spec, len(specs), left)
        for cid, spec in zip(ids, specs, strict=True)
    ]
    now = time.time()  # apart by 10 us: oldest first is spawn order (``children_of``)
    _list_children(rt, parent_id, {cid: now + n * 1e-5 for n, cid in enumerate(ids)})
    pipe = rt.redis.pipeline(transaction=False)
    for cid in ids:
        pipe.exists(rt.store.key(cid, "state"), rt.store.key(cid, "result"))
    known = pipe.execute() if ids else []
    fresh = [n for n, found in enumerate(known) if not found]
    fresh = [
        n for n, ended in zip(fresh, _celery_results(rt, [ids[n] for n in fresh]), strict=True) if not ended
    ]
    for n in set(range(len(ids))) - set(fresh):  # there already: another run's, or a squatter's
        _refuse_if_foreign(rt, ids[n], parent_id, parent.owner)
    if isinstance(rt.redis, RedisCluster) or rt.store.wait.replicas:
        return [
            ids[n] for n in fresh if create_child(rt, parent_id, parent, ids[n], specs[n], len(specs), left)
        ]
    for n in fresh:  # before its record: the tenant gate starts it in its parent's slot
        timeout = float(wires[n]["timeout_s"] or rt.settings.job_timeout)
        mark_spawned(rt.redis, rt.settings.prefix, ids[n], time.time() + timeout + rt.store.ttl)
    created = _mark_queued(rt, parent.owner, [(ids[n], wires[n]) for n in fresh])
    for cid in {ids[n] for n in fresh} - {cid for cid, _wire in created}:  # another run came first
        _refuse_if_foreign(rt, cid, parent_id, parent.owner)
    for cid, wire in created:
        try:
            send_intake(app, cid, wire)
        except Exception:  # stored and indexed: the reconciler sends its intake message again
            log.warning(
                "child job %s of %s: its intake message was not sent now", cid, parent_id, exc_info=True
            )
    return [cid for cid, _wire in created]


def _mark_queued(
    rt: Runtime, owner: str, children: list[tuple[str, dict[str, Any]]]
) -> list[tuple[str, dict[str, Any]]]:
    """Index and mark ``children`` ``queued`` as ``JobStore.mark_queued`` does, all in one
    transaction (one Redis, no replica wait); those this call marked (no record before)."""
    if not children:
        return []
    store, now = rt.store, time.time()
    pipe, firsts = rt.redis.pipeline(transaction=True), []
    for cid, wire in children:
        timeout = float(wire["timeout_s"] or rt.settings.job_timeout)
        rt.machine.index(cid, now + rt.settings.stall_seconds, int(timeout + store.ttl), pipe=pipe)
        firsts.append(len(pipe.command_stack))  # the reply that says whether this call wrote it
        store.write_queued(cid, wire["reasoner"], owner, json.dumps(wire), client=pipe)
        store.remember(cid, owner=owner, pipe=pipe)
    replies = pipe.execute()
    return [child for child, first in zip(children, firsts, strict=True) if replies[first]]


def _list_children(rt: Runtime, parent_id: str, scores: dict[str, float]) -> None:
    """Add children to the parent's index (``NX``: a listed child keeps its place), which lives as
    long as the parent's record (or ``memory_ttl``), set in the same step as the write."""
    key, parent = children_key(rt, parent_id), rt.store.key(parent_id, "state")
    zadd_with_ttl(rt.redis, key, rt.settings.memory_ttl, scores, "NX", mode="set", like=parent)


def _child_wire(
    parent_id: str, parent: JobSpec, cid: str, spec: ChildSpec, siblings: int, left: float | None
) -> dict[str, Any]:
    """The spec of child ``cid`` as sent (its trace hangs under the parent's tool call)."""
    job_spec = child_spec(parent_id, parent, spec, siblings, left)
    if tracing.STATE.on:
        attrs = {"tandem.reasoner": job_spec.reasoner, "tandem.parent_id": parent_id}
        job_spec = job_spec.model_copy(update={"trace_context": job_span(cid, attrs)})
    return job_spec.model_dump(mode="json")


def _celery_results(rt: Runtime, ids: list[str]) -> list[bool]:
    """Whether each job of ``ids`` has a Celery result (a refusal at intake has only that): one
    ``MGET`` on a Redis result backend, one read per job on another."""
    from tandem.tasks.app import app

    if not ids:
        return []
    try:
        backend = app.backend
        raws = backend.mget([backend.get_key_for_task(cid) for cid in ids])
        return [raw is not None and _success(backend.decode_result(raw)) for raw in raws]
    except Exception:  # no MGET (another backend), or keys in several cluster slots
        return [_celery_result(rt, cid) is not None for cid in ids]


def _success(meta: Any) -> bool:
    return isinstance(meta, dict) and meta.get("status") == "SUCCESS" and isinstance(meta.get("result"), dict)


def foreign(rt: Runtime, cid: str, parent_id: str, owner: str) -> bool:
    """Whether a job stored under the derived child id ``cid`` is not a child ``parent_id`` started:
    its spec (or intake) names another parent or owner, or its result another owner. The ids derive
    from public inputs, so a client may submit a job under one first; that job must not become the
    child (reach the parent's index, its ``child_ended``, its outcomes, its cascade)."""
    for part in ("spec", "intake"):
        raw = rt.redis.get(rt.store.key(cid, part))
        if raw is not None:
            stored = json.loads(raw)
            return bool(stored.get("parent_id") != parent_id or stored.get("owner", "default") != owner)
    ended = rt.store.result(cid) or _celery_result(rt, cid)
    return ended is not None and ended.owner != owner


def _stored(rt: Runtime, ids: list[str]) -> list[str]:
    """The ids of ``ids`` under which a job is stored (a record, spec, intake or result): one round
    trip, so that only those are looked at closely (``foreign``)."""
    pipe = rt.redis.pipeline(transaction=False)
    for cid in ids:
        pipe.exists(*(rt.store.key(cid, part) for part in ("state", "spec", "intake", "result")))
    return [cid for cid, found in zip(ids, pipe.execute(), strict=True) if found]


def taken_refusal(taken: list[str]) -> str:
    """The ``SpawnError`` of a spawn whose derived child ids name jobs this job did not start."""
    return (
        f"the child job ids {taken} are taken by jobs this job did not start (submitted under them by "
        "another client): no child job was started"
    )


def _refuse_if_foreign(rt: Runtime, cid: str, parent_id: str, owner: str) -> None:
    """A job that took ``cid`` between the spawn's check and its creation: out of the parent's
    children again, and the spawn refused."""
    if foreign(rt, cid, parent_id, owner):
        rt.redis.zrem(children_key(rt, parent_id), cid)
        raise SpawnError(taken_refusal([cid]))


def resolve(rt: Runtime, parent_id: str) -> bool:
    """Resume ``parent_id`` if it waits for its children and their wait holds: their outcomes are
    stored as the pause's answer, and the held call is sent again. ``True`` when it resumed."""
    from tandem.tasks.steps.dispatch import send_outbox

    store = ChildrenStore(rt.store)
    record = store.get(parent_id)
    if not isinstance(record, ChildrenRecord) or record.answered:
        return False
    state = rt.machine.record(parent_id)
    if state.get("state") != ChildrenStore.state or state.get("pause_kind") != ChildrenStore.kind:
        return False
    outcomes = outcomes_of(rt, record.children)
    if not wait_holds(record.wait, outcomes):
        return False
    try:
        store.resume(record, outcomes)
    except (DecisionRefused, Repeated):  # resumed by another process first, or it ended
        return False
    send_outbox(rt, parent_id)
    return True


Ender = Callable[[str, str], Any]
"""Ends a job by id for a reason (``tandem.tasks.steps.guard.end_job``)."""

PARKED = ("awaiting_approval", "waiting_for_children")
"""The states of a job that waits holding no worker and with no task queued (a pause)."""


def cascade(rt: Runtime, job_id: str, end: Ender | None = None, children: list[str] | None = None) -> int:
    """Cancel every child of ``job_id`` that has not ended; how many were asked to stop.

    The cancel flags are written in one round trip. A child that a worker runs ends at its next
    step, as any cancelled job; a child parked (``PARKED``: no worker holds it, no task of it is
    queued) is ended here at once, as the reconciler's next sweep would end it (and a second end
    is a no-op), so a cascade does not wait for a sweep per level of the tree. ``end`` ends a job
    (``tandem.tasks.steps.guard.end_job``, passed in by its caller: guard imports this module);
    without it parked children are left to the sweep. ``children``: the children it started, when
    the caller knows them already (a job's result lists them); read otherwise."""
    if children is None:
        children = own_children(rt, job_id, _owner(rt, job_id))
    running = [o for o in outcomes_of(rt, children) if not o.ended]
    pipe = rt.redis.pipeline(transaction=False)  # (as ``JobStore.request_cancel``)
    for child in running:
        pipe.set(rt.store.key(child.job_id, "cancel"), "1", ex=rt.store.ttl)
        rt.machine.look_now(child.job_id, pipe)
    if running:
        pipe.execute()
    for child in (c for c in running if c.status in PARKED):
        if end is None:
            break
        try:
            end(child.job_id, "cancel")
        except Ignore:  # ended by another process first
            pass
        except Exception:  # its flag is set: the reconciler's next sweep ends it
            log.warning("job %s: ending its parked child %s failed", job_id, child.job_id, exc_info=True)
    return len(running)


def on_job_ended(
    rt: Runtime, job_id: str, spec: JobSpec | None, result: JobResult, end: Ender | None = None
) -> None:
    """What a job's end means for its family: its parent hears of it (``child_ended``, the wait
    checked), its children still running are cancelled. Safe to run twice (a second
    ``child_ended`` may be published; the resume and the cancels are idempotent). ``result`` is
    the job's stored end, whose ``children`` are those it started."""
    try:
        parent = spec.parent_id if spec is not None else None
        # Only a child its parent started (not a spec that merely names a parent) reaches it.
        spawned = (
            parent is not None
            and spec is not None
            and rt.redis.zscore(children_key(rt, parent), job_id) is not None
            and not foreign(rt, job_id, parent, _owner(rt, parent))
        )
        if (
            parent is not None
            and spawned
            and rt.machine.record(parent).get("state") not in (None, *FINAL_STATES)
        ):
            ended = ChildEnded(child_id=job_id, status=result.status, error=result.error)
            rt.store.publish(parent, ended)  # (never after the parent's ``final``)
            resolve(rt, parent)
        if result.children:  # the children it started (none: no read of an empty index)
            cascade(rt, job_id, end, result.children)
    except Exception:  # the reconciler checks the parent's wait, and cancels again, later
        log.warning("job %s: telling its parent or children of its end failed", job_id, exc_info=True)


def _owner(rt: Runtime, job_id: str) -> str:
    spec = rt.store.spec(job_id)
    return spec.owner if spec is not None else DEFAULT_TENANT


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
