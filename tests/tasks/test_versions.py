"""Versions (``tandem.tasks.state.versions``): every job record holds the format versions of its spec
and memory; a worker runs the versions it reads, and hands a step, an intake or a control message of
any other back to its queue untouched (``tandem.tasks.steps.hand_back``), never failing the job.

The state-machine tests run on fakeredis, the real Redis (db 8) and the one-slot fakeredis; the
step and task tests run a job in this thread (every message applied as it was sent), on fakeredis.
A worker of another release is a ``JobMachine`` with other ``SupportedVersions``.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
from collections import deque
from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest
from celery._state import _task_stack
from celery.exceptions import Ignore
from pydantic import BaseModel

from tandem.broker_config import Settings
from tandem.reasoner.loop.step import StepKind
from tandem.reasoner.messages import ModelMessage
from tandem.tasks import runtime as runtime_module
from tandem.tasks.app import app
from tandem.tasks.control.approvals import ApprovalRecord
from tandem.tasks.control.children import ChildrenRecord
from tandem.tasks.control.questions import QuestionRecord
from tandem.tasks.runtime import Runtime
from tandem.tasks.spec import JobSpec
from tandem.tasks.state.claims import ClaimRefused, Message, Reconciled
from tandem.tasks.state.machine import JobMachine
from tandem.tasks.state.reconciler import Reconciler
from tandem.tasks.state.record import JobRecord
from tandem.tasks.state.reopen import Placement, Reopener
from tandem.tasks.state.versions import (
    MEMORY_VERSION,
    SPEC_VERSION,
    SUPPORTED,
    JobVersions,
    SupportedVersions,
    versions_in_flight,
)
from tandem.tasks.steps import hand_back
from tandem.workers.version_check import advice, format_versions, versions_json

JOB = "job-v"
LEASE = 30.0
NEWER = JobVersions(SPEC_VERSION + 1, MEMORY_VERSION)
NEXT_RELEASE = SupportedVersions(
    oldest=SUPPORTED.oldest, newest=JobVersions(SPEC_VERSION, MEMORY_VERSION + 1)
)
"""A worker of the next release: it reads everything this one does, and writes memory v2."""


def create(machine: JobMachine, job_id: str = JOB, kind: str = "thinker") -> None:
    outbox: list[Message] = [{"task": f"tandem.{kind}", "args": [job_id, 0]}]
    assert machine.create(job_id, '{"goal": "g"}', "dual", (0, kind), outbox, timeout=3600, ttl_after=600)


def stamp(machine: JobMachine, versions: JobVersions, job_id: str = JOB) -> None:
    """What a worker of another release leaves in the record."""
    machine.redis.hset(
        machine.store.key(job_id, "state"),
        mapping={"spec_version": versions.spec, "memory_version": versions.memory},
    )


def unstamp(machine: JobMachine, job_id: str = JOB) -> None:
    """A record as the release before versions wrote it: no version fields."""
    machine.redis.hdel(machine.store.key(job_id, "state"), "spec_version", "memory_version")


# -- the record ----------------------------------------------------------------------------------


def test_the_intake_stamps_the_versions_it_writes(machine: JobMachine) -> None:
    create(machine)
    record = machine.record(JOB)
    assert (record["spec_version"], record["memory_version"]) == (str(SPEC_VERSION), str(MEMORY_VERSION))
    typed = machine.job(JOB)
    assert typed is not None and (typed.spec_version, typed.memory_version) == (SPEC_VERSION, MEMORY_VERSION)
    assert machine.job_versions(JOB) == JobVersions(SPEC_VERSION, MEMORY_VERSION)


def test_a_record_without_versions_reads_as_version_0_and_runs(machine: JobMachine) -> None:
    create(machine)
    unstamp(machine)
    assert machine.job_versions(JOB) == JobVersions(0, 0)
    parsed = JobRecord.parse(machine.redis.hgetall(machine.store.key(JOB, "state")))
    assert parsed is not None and (parsed.spec_version, parsed.memory_version) == (0, 0)
    got = machine.claim(JOB, 0, "thinker", LEASE, 5)
    assert not isinstance(got, ClaimRefused), got
    # The worker writes in its own memory format from now on; the spec stays as it was stored.
    record = machine.record(JOB)
    assert "spec_version" not in record and record["memory_version"] == str(MEMORY_VERSION)


@pytest.mark.parametrize(
    "malformed",
    [pytest.param("", id="empty"), pytest.param("x", id="text"), pytest.param("-3", id="negative")],
)
def test_a_malformed_version_reads_as_0(malformed: str) -> None:
    assert JobVersions.of({"spec_version": malformed, "memory_version": b"2"}) == JobVersions(0, 2)


# -- claims --------------------------------------------------------------------------------------


def test_a_claim_of_a_newer_job_is_refused_and_writes_nothing(machine: JobMachine) -> None:
    create(machine)
    stamp(machine, NEWER)
    before = machine.record(JOB)
    assert machine.claim(JOB, 0, "thinker", LEASE, 5) == ClaimRefused("newer", NEWER)
    assert machine.record(JOB) == before  # no epoch, holder, progress or expiry moved


def test_a_claim_of_a_job_whose_lease_ran_out_is_refused_before_the_expiry_is_counted(
    machine: JobMachine,
) -> None:
    create(machine)
    newer_worker = JobMachine(machine.store, NEXT_RELEASE)
    assert not isinstance(newer_worker.claim(JOB, 0, "thinker", LEASE, 5), ClaimRefused)
    machine.redis.hset(machine.store.key(JOB, "state"), "lease_until", "1.0")  # its worker died
    before = machine.record(JOB)
    got = machine.claim(JOB, 0, "thinker", LEASE, 5)
    assert got == ClaimRefused("newer", JobVersions(SPEC_VERSION, MEMORY_VERSION + 1))
    assert machine.record(JOB) == before  # the lease expiry is the next release's to count


def test_a_worker_of_the_next_release_takes_a_job_and_this_one_then_hands_it_back(
    machine: JobMachine,
) -> None:
    create(machine)
    newer_worker = JobMachine(machine.store, NEXT_RELEASE)
    claim = newer_worker.claim(JOB, 0, "thinker", LEASE, 5)
    assert not isinstance(claim, ClaimRefused)
    assert machine.record(JOB)["memory_version"] == str(MEMORY_VERSION + 1)  # raised before it writes
    assert newer_worker.transition(claim, (0, "actor", 0, ""), [], [], tx="t1")
    assert machine.claim(JOB, 0, "actor", LEASE, 5) == ClaimRefused(
        "newer", JobVersions(SPEC_VERSION, MEMORY_VERSION + 1)
    )
    assert not isinstance(newer_worker.claim(JOB, 0, "actor", LEASE, 5), ClaimRefused)


def test_a_tool_call_of_a_newer_job_is_refused_and_writes_nothing(machine: JobMachine) -> None:
    create(machine)
    claim = machine.claim(JOB, 0, "thinker", LEASE, 5)
    assert not isinstance(claim, ClaimRefused)
    assert machine.transition(claim, (0, "tools", 2, ""), [], [], tx="t1")
    stamp(machine, NEWER)
    before = (machine.record(JOB), machine.redis.hgetall(machine.store.key(JOB, "calls")))
    assert machine.claim_call(JOB, 0, 1, LEASE, 5) == ClaimRefused("newer", NEWER)
    assert (machine.record(JOB), machine.redis.hgetall(machine.store.key(JOB, "calls"))) == before


def test_a_job_older_than_a_worker_reads_is_refused_as_older(machine: JobMachine) -> None:
    create(machine)
    unstamp(machine)
    later = SupportedVersions(oldest=JobVersions(1, 1), newest=JobVersions(3, 3))
    assert JobMachine(machine.store, later).claim(JOB, 0, "thinker", LEASE, 5) == ClaimRefused(
        "older", JobVersions(0, 0)
    )


# -- the reconciler ------------------------------------------------------------------------------


def test_the_reconciler_leaves_a_newer_stalled_job_alone(machine: JobMachine) -> None:
    create(machine)
    machine.redis.hset(machine.store.key(JOB, "state"), "progress_at", "1.0")  # stalled long ago
    stamp(machine, NEWER)
    before = machine.record(JOB)
    assert machine.reconcile(JOB, 1.0, 5, 1.0) == Reconciled("newer", versions=NEWER)
    assert machine.record(JOB) == before
    stamp(machine, JobVersions(SPEC_VERSION, MEMORY_VERSION))
    assert machine.reconcile(JOB, 1.0, 5, 1.0).action == "resend"  # a worker that reads it does


def test_the_reconciler_says_so_once_per_job_and_sends_nothing(
    machine: JobMachine, caplog: pytest.LogCaptureFixture
) -> None:
    create(machine)
    machine.redis.hset(machine.store.key(JOB, "state"), "progress_at", "1.0")
    stamp(machine, NEWER)
    acted: list[tuple[str, str]] = []
    reconciler = Reconciler(
        machine,
        lease_seconds=2.0,
        stall_seconds=1.0,
        max_lease_expiries=5,
        resend=lambda job_id, verdict: acted.append(("resend", job_id)),
        end=lambda job_id, verdict: acted.append(("end", job_id)),
    )
    with caplog.at_level(logging.WARNING, logger="tandem.reconciler"):
        for _ in range(3):
            machine.index(JOB, 0.0, 600)  # due again at once
            assert reconciler.sweep() == 0
    assert acted == []
    lines = [r.getMessage() for r in caplog.records if JOB in r.getMessage()]
    assert len(lines) == 1 and "newer than this worker reads" in lines[0], lines


# -- resume, fork, queued ------------------------------------------------------------------------


def test_a_resume_stamps_the_spec_it_stores_and_never_lowers_the_memory_version(machine: JobMachine) -> None:
    create(machine)
    machine.redis.hset(machine.store.key(JOB, "state"), mapping={"state": "failed", "updated_at": "5"})
    unstamp(machine)
    at = Placement(1, "thinker", [{"task": "tandem.thinker_turn", "args": [JOB, 1]}])
    got = Reopener(machine).reopen(JOB, "5", '{"goal": "g"}', "dual", at, timeout=60, ttl_after=600)
    assert got.outcome == "ok"
    assert machine.job_versions(JOB) == JobVersions(SPEC_VERSION, MEMORY_VERSION)

    newer_worker = JobMachine(machine.store, NEXT_RELEASE)
    machine.redis.hset(machine.store.key(JOB, "state"), mapping={"state": "failed", "updated_at": "6"})
    stamp(machine, JobVersions(SPEC_VERSION, MEMORY_VERSION + 1))
    got = Reopener(newer_worker).reopen(JOB, "6", '{"goal": "g"}', "dual", at, timeout=60, ttl_after=600)
    assert got.outcome == "ok"
    assert machine.job_versions(JOB) == JobVersions(SPEC_VERSION, MEMORY_VERSION + 1)


def test_a_fork_is_stamped_with_the_forking_workers_versions(machine: JobMachine) -> None:
    at = Placement(1, "thinker", [{"task": "tandem.thinker_turn", "args": ["fork-1", 1]}])
    got = Reopener(machine).start("fork-1", '{"goal": "g"}', "dual", at, timeout=60, ttl_after=600, memory=[])
    assert got.outcome == "ok"
    assert machine.job_versions("fork-1") == JobVersions(SPEC_VERSION, MEMORY_VERSION)


def test_a_queued_record_holds_the_version_of_the_spec_submit_sent(machine: JobMachine) -> None:
    assert machine.store.mark_queued(JOB, intake='{"goal": "g"}')
    assert machine.record(JOB)["spec_version"] == str(SPEC_VERSION)
    create(machine)  # the intake's record says the worker's own
    assert machine.job_versions(JOB) == JobVersions(SPEC_VERSION, MEMORY_VERSION)


# -- version-check -------------------------------------------------------------------------------


def test_versions_in_flight_counts_every_live_job_by_version(machine: JobMachine) -> None:
    for n in range(3):
        create(machine, f"a-{n}")
        machine.index(f"a-{n}", 0.0, 600)
    create(machine, "old")
    unstamp(machine, "old")
    create(machine, "new")
    stamp(machine, NEWER, "new")
    create(machine, "done")
    machine.redis.hset(machine.store.key("done", "state"), "state", "completed")
    for job_id in ("old", "new", "done", "expired"):
        machine.index(job_id, 0.0, 600)
    found = versions_in_flight(machine.redis, machine.store.prefix, batch=2)
    assert found.counts == {JobVersions(SPEC_VERSION, MEMORY_VERSION): 3, JobVersions(0, 0): 1, NEWER: 1}
    assert found.ended == 1
    assert (
        len(advice(found)) == 1
        and "1 live job(s) were written or taken by a newer release" in advice(found)[0]
    )
    table = format_versions(found)
    (row,) = [line for line in table.splitlines() if line.startswith(f"v{NEWER.spec} ")]
    assert row.split()[:3] == [f"v{NEWER.spec}", f"v{NEWER.memory}", "1"] and "newer than this release" in row
    assert table.splitlines()[-1].startswith("what to do: 1 live job(s) were written or taken by a newer")
    data = json.loads(versions_json(found))
    assert data["ok"] is False and data["reads"] == {"spec": [0, SPEC_VERSION], "memory": [0, MEMORY_VERSION]}
    assert {(e["spec_version"], e["memory_version"], e["jobs"], e["fit"]) for e in data["in_flight"]} == {
        (0, 0, 1, "ok"),
        (SPEC_VERSION, MEMORY_VERSION, 3, "ok"),
        (NEWER.spec, NEWER.memory, 1, "newer"),
    }
    machine.redis.delete(machine.store.key("new", "state"))
    assert advice(versions_in_flight(machine.redis, machine.store.prefix)) == []


# -- hand-backs on the task side -----------------------------------------------------------------


@pytest.fixture
def rt(monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    for module in app.conf.imports:  # the tasks, as a worker has them
        importlib.import_module(module)
    runtime = Runtime(Settings(lease_seconds=30.0, stall_seconds=60.0, memory_ttl=600))
    runtime.__dict__["redis"] = fakeredis.FakeRedis()
    monkeypatch.setattr(runtime_module, "_runtime", runtime)
    monkeypatch.setattr(hand_back, "_told", hand_back.OncePerJob())
    yield runtime


Sent = deque[dict[str, Any]]


def capture(monkeypatch: pytest.MonkeyPatch) -> Sent:
    queue: Sent = deque()

    def send_task(name: str, args: Any = None, kwargs: Any = None, **options: Any) -> None:
        queue.append({"name": name, "args": list(args or []), "kwargs": dict(kwargs or {}), **options})

    monkeypatch.setattr(app, "send_task", send_task)
    return queue


def apply(sent: dict[str, Any]) -> Any:
    """Run one captured message as a worker would: its arguments, id and headers."""
    return app.tasks[sent["name"]].apply(
        args=sent["args"], kwargs=sent["kwargs"], task_id=sent.get("task_id"), headers=sent.get("headers")
    )


def drain(queue: Sent) -> None:
    while queue:
        apply(queue.popleft())


def snapshot(rt: Runtime, job_id: str = JOB) -> tuple[dict[str, str], list[Any], int]:
    """What a client can see of a job: its record, its events, its memory."""
    events = rt.redis.xrange(rt.store.key(job_id, "events"))
    return (
        rt.machine.record(job_id),
        [fields for _, fields in events],
        rt.redis.hlen(rt.store.key(job_id, "memory")),
    )


def test_a_step_of_a_newer_job_goes_back_to_its_queue_until_a_worker_reads_it(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    queue = capture(monkeypatch)
    app.tasks["tandem.infer"].apply(
        kwargs={"spec": {"goal": "What is 17 * 23?"}}, task_id=JOB, ignore_result=True
    )
    (first,) = queue
    assert first["name"] == "tandem.thinker_turn"
    stamp(rt.machine, NEWER)  # a worker of the next release wrote the record
    before = snapshot(rt)

    with caplog.at_level(logging.DEBUG, logger="tandem.tasks"):
        for count in range(1, 4):  # handed back again and again: the same message, untouched job
            sent = queue.popleft()
            assert apply(sent).state == "IGNORED"
            (copy,) = queue
            assert (copy["name"], copy["args"]) == ("tandem.thinker_turn", [JOB, 0])
            assert copy["headers"]["tandem_handbacks"] == count
            low, high = hand_back.FIRST_DELAY * 2 ** (count - 1) / 2, hand_back.FIRST_DELAY * 2 ** (count - 1)
            assert low <= copy["countdown"] <= high, (count, copy["countdown"])
            assert snapshot(rt) == before
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and JOB in r.getMessage()]
    assert len(warned) == 1, [r.getMessage() for r in warned]  # once per job, not per hand-back
    assert "newer than this worker reads" in warned[0].getMessage()

    stamp(rt.machine, JobVersions(SPEC_VERSION, MEMORY_VERSION))  # written back: this worker reads it
    drain(queue)
    result = rt.store.result(JOB)
    assert result is not None and result.status == "completed", result


@pytest.mark.parametrize(
    ("kind", "task", "count"),
    [
        pytest.param("thinker", "tandem.thinker_turn", 6, id="its-own-message"),
        pytest.param("finalize", "tandem.finalize", 1, id="a-step-run-at-once-by-another"),
    ],
)
def test_a_step_hands_back_its_own_message_with_the_running_ones_priority(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch, kind: StepKind, task: str, count: int
) -> None:
    """A step run by its own message carries its hand-back count on; ``finalize`` (or ``collect``)
    run at once by the step that moved the job there sends its own message, counted from 1; both
    keep the job's priority and trace."""
    queue = capture(monkeypatch)
    running = app.tasks["tandem.thinker_turn"]
    running.push_request(
        args=[JOB, 0],
        task="tandem.thinker_turn",
        delivery_info={"priority": 7},
        tandem_handbacks=5,
        traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    )
    _task_stack.push(running)
    try:
        with pytest.raises(Ignore):
            hand_back.hand_back_step(JOB, 0, kind, ClaimRefused("newer", NEWER), SUPPORTED)
    finally:
        _task_stack.pop()
        running.pop_request()
    (sent,) = queue
    assert (sent["name"], sent["args"], sent["priority"]) == (task, [JOB, 0], 7)
    assert sent["headers"]["tandem_handbacks"] == count
    assert sent["headers"]["traceparent"].startswith("00-0af7651916cd43dd")


def test_an_intake_of_a_newer_spec_goes_back_under_its_job_id(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = capture(monkeypatch)
    spec = {"goal": "What is 17 * 23?"}
    newer = {"tandem_spec_version": SPEC_VERSION + 1}
    assert (
        app.tasks["tandem.infer"].apply(kwargs={"spec": spec}, task_id=JOB, headers=newer).state == "IGNORED"
    )
    assert rt.machine.record(JOB) == {} and rt.redis.keys(f"{rt.settings.prefix}:*") == []  # nothing stored
    (copy,) = queue
    assert (copy["name"], copy["kwargs"], copy["task_id"]) == ("tandem.infer", {"spec": spec}, JOB)
    assert copy["headers"] == newer and copy["retries"] == 1 and 0.5 <= copy["countdown"] <= 1.0

    queue.clear()
    app.tasks["tandem.infer"].apply(
        kwargs={"spec": spec}, task_id=JOB, headers={"tandem_spec_version": SPEC_VERSION}
    )
    assert rt.machine.job_versions(JOB) == JobVersions(SPEC_VERSION, MEMORY_VERSION)  # taken in


@pytest.mark.parametrize(
    ("task", "kwargs"),
    [
        pytest.param("tandem.message", {"text": "use the 2025 figures"}, id="message"),
        pytest.param("tandem.decide", {"decisions": [{"index": 1, "approve": True}]}, id="decide"),
        pytest.param("tandem.answer", {"answer": "yes", "pause_id": "p"}, id="answer"),
        pytest.param("tandem.resume", {}, id="resume"),
        pytest.param("tandem.fork", {"round": 1}, id="fork"),
        pytest.param("tandem.follow_up", {"goal": "and now 2024"}, id="follow-up"),
    ],
)
def test_a_control_task_on_a_newer_job_goes_back_under_its_task_id(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch, task: str, kwargs: dict[str, Any]
) -> None:
    create(rt.machine)
    stamp(rt.machine, NEWER)
    before = snapshot(rt)
    queue = capture(monkeypatch)
    sent = {"job_id": JOB, **kwargs}
    assert app.tasks[task].apply(kwargs=sent, task_id="call-1").state == "IGNORED"
    (copy,) = queue
    assert (copy["name"], copy["kwargs"], copy["task_id"], copy["retries"]) == (task, sent, "call-1", 1)
    assert snapshot(rt) == before
    assert rt.redis.keys(f"{rt.settings.prefix}:*:state") == [rt.store.key(JOB, "state").encode()]  # no fork


def test_the_hand_back_countdown_doubles_up_to_its_cap() -> None:
    assert [hand_back.delay(n, rng=lambda: 1.0) for n in (0, 1, 2, 5, 6, 40)] == [1, 2, 4, 32, 60, 60]
    assert hand_back.delay(3, rng=lambda: 0.0) == 4.0  # the jitter halves it at most


# -- the formats pinned to their versions --------------------------------------------------------


def _shape(schema: Any) -> Any:
    """A JSON schema without its prose (descriptions, titles): what a reader of the data depends on."""
    if isinstance(schema, dict):
        return {k: _shape(v) for k, v in schema.items() if k not in ("description", "title", "examples")}
    if isinstance(schema, list):
        return [_shape(v) for v in schema]
    return schema


def _fingerprint(*models: type[BaseModel]) -> str:
    shapes = [_shape(m.model_json_schema(mode="serialization")) for m in models]
    return hashlib.sha256(json.dumps(shapes, sort_keys=True).encode()).hexdigest()[:16]


SPEC_SHAPES = {1: "57a417dafae11be6", 2: "3bca796a5d2ed95e"}
"""The shape of ``JobSpec`` as each spec version stores it."""
MEMORY_SHAPES = {1: "86a8a47f4bc737eb", 2: "2f12a6091849527d"}
"""The shapes of what steps write (messages with their tool results, pause records) per memory version.
Version 2 was 5171a81898c51898 until a tool call's result gained ``usage`` (what the child jobs it
started spent): an optional field, which the release before ignores (its models ignore a field
they do not know), and the round's ``tool`` message carries the sum in its ``usage``, which that
release reads and counts already; so pinned under version 2."""


def test_the_stored_formats_are_those_of_their_versions() -> None:
    """A change to what is stored needs a decision: can the release before read it? If not, bump the
    version (``tandem/tasks/state/versions.py``) and pin the new shape under it; if so (a description
    changed, an optional field a reader ignores), pin it under the current version."""
    spec = _fingerprint(JobSpec)
    memory = _fingerprint(ModelMessage, ApprovalRecord, QuestionRecord)
    if MEMORY_VERSION >= 2:  # version 2 added the wait for child jobs (its state and pause record)
        memory = _fingerprint(ModelMessage, ApprovalRecord, QuestionRecord, ChildrenRecord)
    assert SPEC_SHAPES.get(SPEC_VERSION) == spec, (
        f"JobSpec's stored shape is now {spec}, pinned {SPEC_SHAPES.get(SPEC_VERSION)} for SPEC_VERSION="
        f"{SPEC_VERSION}: the release before refuses a spec with a field it does not know (extra='forbid'), "
        "so a new field needs SPEC_VERSION + 1 (see the test's docstring)"
    )
    assert MEMORY_SHAPES.get(MEMORY_VERSION) == memory, (
        f"the memory's stored shape is now {memory}, pinned {MEMORY_SHAPES.get(MEMORY_VERSION)} for "
        f"MEMORY_VERSION={MEMORY_VERSION}: decide whether the release before reads it (see the docstring)"
    )
