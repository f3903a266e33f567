"""Breaking the order of events docs/events.md promises ("The order of events"), on real
``celery worker`` processes and a real Redis with both roles streaming, for dual, mono and ReAct
jobs: many jobs at once, a host answering 429/500 and breaking its stream, parallel tool calls, a
job parked for an approval and a question, resume and fork of ended jobs, a cancel mid-reply, a
worker SIGKILLed mid-reply and one SIGSTOPped past its lease.

Every job's stream is checked as stored (``XRANGE``) and as each reader delivers it
(``JobHandle.events()`` and ``aevents()``, ``tandem api``'s SSE with a dropped link resumed by
``Last-Event-ID``, ``tandem.Client.events()``): ``event_order.order_problems`` lists each break
of the promise, and ``event_order.documented_reader`` replays the stream as the page tells a reader
to and must show every reply's text.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tandem.tasks import JobHandle
from tests.integration import event_faults as faults
from tests.integration.breaking import ended, poll
from tests.integration.conftest import Cluster
from tests.integration.event_hosts import (
    FAST_LEASES,
    Gate,
    Hosts,
    add,
    broken,
    error_midstream,
    gated,
    goal,
    status,
    streaming_cluster,
)
from tests.integration.event_order import (
    ApiServer,
    AsyncHandleReader,
    ClientReader,
    Event,
    HandleReader,
    Reader,
    SseReader,
    compact,
    documented_reader,
    order_problems,
    raw_events,
    replies_of,
    until_final,
)
from tests.integration.event_tools import RELEASE

pytestmark = pytest.mark.integration

Setup = tuple[Cluster, Hosts, ApiServer]
PARALLEL = [[add(1, 2), add(3, 4), {"name": "sleep_tool", "args": {"seconds": 0.1}}], [add(5, 6)]]
"""Two rounds of tools, the first with three calls at once."""
DELIVERED = {"dual": "all planned calls ran", "mono": "mono plan done", "react": "react done: "}


@pytest.fixture(scope="module")
def stream(redis_base: str) -> Iterator[Setup]:
    """Thinker, actor and tools workers (both roles streaming) and ``tandem api``, for the module."""
    with streaming_cluster(redis_base) as (cluster, hosts):
        cluster.start("thinker", "actor", "tools")
        api = ApiServer(cluster.env)
        try:
            yield cluster, hosts, api
        finally:
            api.stop()


@pytest.fixture
def faulty(redis_base: str) -> Iterator[Setup]:
    """Two groups of workers (thinker, actor, tools; thinker, actor) with 2 s leases, and the API."""
    with streaming_cluster(redis_base, **FAST_LEASES) as (cluster, hosts):
        cluster.start("thinker", "actor", "tools", name="a")
        cluster.start("thinker", "actor", name="b")
        api = ApiServer(cluster.env)
        try:
            yield cluster, hosts, api
        finally:
            api.stop()


def follow(api: ApiServer, handle: JobHandle, *, every_reader: bool = False) -> list[Reader]:
    """Live readers of a job: its handle's ``events()`` and the SSE (dropped after 4 events and
    resumed); with ``every_reader``, ``aevents()`` and ``tandem.Client`` too."""
    readers: list[Reader] = [HandleReader(handle), SseReader(api.url, handle.id, drop_after=4)]
    if every_reader:
        readers += [AsyncHandleReader(handle), ClientReader(api.url, handle.id)]
    for reader in readers:
        reader.start()
    return readers


def check(
    cluster: Cluster, handle: JobHandle, readers: list[Reader], *, late_tokens: bool = False
) -> list[Event]:
    """The job's stream keeps the documented order, a documented reader shows every reply's text,
    and every reader delivered exactly the stream up to its final, in order; the stream."""
    raw = raw_events(cluster.redis, handle.id)
    assert order_problems(raw, late_tokens=late_tokens) == [], compact(raw)
    shown, written = documented_reader(raw), replies_of(raw)
    assert {k: v for k, v in shown.items() if any(written[k])} == {
        k: v for k, v in written.items() if any(v)
    }, compact(raw)
    expected = [(e["id"], e["type"]) for e in until_final(raw)]
    for reader in readers:
        got = reader.result(120)
        assert [(e["id"], e["type"]) for e in got] == expected, reader.name
        assert order_problems(got, late_tokens=late_tokens) == [], f"{reader.name}: {compact(got)}"
        assert getattr(reader, "problems", []) == [], reader.name
    return raw


def attempts(raw: list[Event], round_no: int, role: str) -> list[str]:
    """The attempts of one round and role's model call, in the order they began."""
    seen: list[str] = []
    for e in raw:
        mine = e["type"] == "model_delta" and (e["round"], e["role"]) == (round_no, role)
        if mine and e["attempt"] not in seen:
            seen.append(e["attempt"])
    return seen


def rounds_started(raw: list[Event]) -> list[int]:
    return [e["round"] for e in raw if e["type"] == "round_started"]


def submit(cluster: Cluster, reasoner: str, label: str, plan: Any = PARALLEL, **spec: Any) -> JobHandle:
    return cluster.submit(
        goal=goal(label, plan), reasoner=reasoner, max_rounds=spec.pop("max_rounds", 6), **spec
    )


def completed(handle: JobHandle, reasoner: str) -> None:
    result = handle.result(timeout=240)
    assert result.status == "completed", result
    assert (result.deliverable or "").startswith(DELIVERED[reasoner]), result


def test_many_jobs_of_every_reasoner_keep_the_order_on_every_reader(stream: Setup) -> None:
    cluster, hosts, api = stream
    jobs = []
    for n in range(3):
        for reasoner in ("dual", "mono", "react"):
            label = f"many-{reasoner}-{n}"
            hosts.pace[label] = 0.02
            handle = submit(cluster, reasoner, label)
            jobs.append((reasoner, handle, follow(api, handle, every_reader=n == 0)))
    ended(cluster, [h for _, h, _ in jobs], 300)
    for reasoner, handle, readers in jobs:
        completed(handle, reasoner)
        raw = check(cluster, handle, readers)
        assert rounds_started(raw) == [0, 1, 2], compact(raw)
        calls = [(e["round"], e["index"]) for e in raw if e["type"] == "tool_call"]
        assert calls == sorted(calls, key=lambda c: c[0]) and len(calls) == 4, compact(raw)


def test_a_host_answering_429_and_500_before_streaming_keeps_the_order(stream: Setup) -> None:
    cluster, hosts, api = stream
    hosts.fault("http-dual", "thinker", 1, status(429, retry_after=0.3), status(500))
    hosts.fault("http-dual", "actor", 0, status(500))
    hosts.fault("http-mono", "actor", 1, status(429, retry_after=0.3), status(500))
    hosts.fault("http-react", "actor", 0, status(503, retry_after=0.3))
    jobs = {r: submit(cluster, r, f"http-{r}") for r in ("dual", "mono", "react")}
    readers = {r: follow(api, h) for r, h in jobs.items()}
    for reasoner, handle in jobs.items():
        completed(handle, reasoner)
        raw = check(cluster, handle, readers[reasoner])
        assert rounds_started(raw) == [0, 1, 2], compact(raw)
    assert len(hosts.requests("http-dual", "thinker", 1)) == 3
    assert len(hosts.requests("http-mono", "actor", 1)) == 3


def test_a_stream_broken_mid_reply_starts_over_under_a_new_attempt(stream: Setup) -> None:
    cluster, hosts, api = stream
    hosts.fault("cut-dual", "thinker", 1, broken(after=6))
    hosts.fault("cut-dual", "actor", 1, broken(after=4), status(500))
    hosts.fault("cut-mono", "actor", 0, broken(after=5), broken(after=7))
    hosts.fault("cut-react", "actor", 1, broken(after=3))
    jobs = {r: submit(cluster, r, f"cut-{r}") for r in ("dual", "mono", "react")}
    readers = {r: follow(api, h) for r, h in jobs.items()}
    cut = {"dual": [(1, "thinker"), (1, "actor")], "mono": [(0, "actor")], "react": [(1, "actor")]}
    for reasoner, handle in jobs.items():
        completed(handle, reasoner)
        raw = check(cluster, handle, readers[reasoner])
        assert rounds_started(raw) == [0, 1, 2], compact(raw)
        for round_no, role in cut[reasoner]:
            # the broken reply's tokens stay, under their attempt; the reply is another attempt's
            assert len(attempts(raw, round_no, role)) >= 2, (round_no, role, compact(raw))


def test_a_stream_that_reports_an_error_mid_reply_starts_over_under_a_new_attempt(stream: Setup) -> None:
    cluster, hosts, api = stream
    hosts.fault("err-dual", "thinker", 1, error_midstream(after=6, code=500))
    hosts.fault("err-mono", "actor", 0, error_midstream(after=5, code=429))
    hosts.fault("err-react", "actor", 1, error_midstream(after=3, code=503))
    jobs = {r: submit(cluster, r, f"err-{r}") for r in ("dual", "mono", "react")}
    readers = {r: follow(api, h) for r, h in jobs.items()}
    cut = {"dual": (1, "thinker"), "mono": (0, "actor"), "react": (1, "actor")}
    for reasoner, handle in jobs.items():
        completed(handle, reasoner)
        raw = check(cluster, handle, readers[reasoner])
        assert rounds_started(raw) == [0, 1, 2], compact(raw)
        assert len(attempts(raw, *cut[reasoner])) == 2, compact(raw)
        assert len(hosts.requests(f"err-{reasoner}", cut[reasoner][1], cut[reasoner][0])) == 2


def held_calls(cluster: Cluster, job_id: str, name: str = "held") -> list[dict[str, Any]]:
    return [c for c in cluster.tool_calls() if c["job"] == job_id and c["name"] == name]


def test_jobs_parked_for_an_approval_and_a_question_keep_the_order(stream: Setup) -> None:
    cluster, _, api = stream
    notify = {"name": "notify", "args": {"to": "ann"}}
    approve = submit(cluster, "dual", "park-approve", [[notify, add(1, 1)], [add(2, 2)]])
    reject = submit(cluster, "mono", "park-reject", [[add(1, 2), notify]])
    question = submit(cluster, "dual", "park-question", [[{"name": "book_trip", "args": {}}, add(3, 3)]])
    readers = {h.id: follow(api, h) for h in (approve, reject, question)}

    def paused(handle: JobHandle, kind: str) -> bool:
        return any(e["type"] == kind for e in raw_events(cluster.redis, handle.id))

    poll(lambda: paused(approve, "approval_requested"), 120, "the approval request")
    approve.approve()
    poll(lambda: paused(reject, "approval_requested"), 120, "the second approval request")
    reject.reject("not ann")
    poll(lambda: paused(question, "question_asked"), 120, "the question")
    question.answer({"city": "Oslo"})
    for handle, reasoner in ((approve, "dual"), (reject, "mono"), (question, "dual")):
        completed(handle, reasoner)
        raw = check(cluster, handle, readers[handle.id])
        kinds = [e["type"] for e in raw]
        pause = kinds.index("question_asked" if handle is question else "approval_requested")
        # the paused round's calls come after its pause, before the next round starts
        next_round = next(i for i, e in enumerate(raw) if e["type"] == "round_started" and e["round"] == 1)
        assert any(e["type"] == "tool_result" and e["round"] == 0 for e in raw[pause:next_round]), compact(
            raw
        )


def test_a_failed_job_resumed_goes_on_inside_its_round_without_starting_it_again(stream: Setup) -> None:
    cluster, hosts, api = stream
    hosts.fault("resume-failed", "actor", 1, status(401))
    handle = submit(cluster, "dual", "resume-failed")
    first = handle.result(timeout=240)
    assert first.status == "failed", first
    handle.resume()
    readers: list[Reader] = [HandleReader(handle), SseReader(api.url, handle.id)]
    for reader in readers:
        reader.start()
    completed(handle, "dual")
    raw = check(cluster, handle, readers)
    starts = [e for e in raw if e["type"] == "job_started"]
    assert [(s.get("resumed"), s.get("round"), s.get("step")) for s in starts[1:]] == [(True, 1, "actor")], (
        starts
    )
    assert [e["status"] for e in raw if e["type"] == "final"] == ["failed", "completed"], compact(raw)
    assert rounds_started(raw) == [0, 1, 2], compact(raw)
    assert len(hosts.requests("resume-failed", "thinker", 1)) == 1


def test_a_reader_that_saw_a_runs_final_goes_on_with_the_resumed_run(stream: Setup) -> None:
    cluster, hosts, api = stream
    hosts.fault("resume-after", "actor", 0, status(401))
    handle = submit(cluster, "mono", "resume-after")
    assert handle.result(timeout=240).status == "failed"
    seen = raw_events(cluster.redis, handle.id)
    assert seen[-1]["type"] == "final", compact(seen)
    handle.resume()
    readers: list[Reader] = [
        HandleReader(handle, after=seen[-1]["id"]),
        SseReader(api.url, handle.id, after=seen[-1]["id"]),
    ]
    for reader in readers:
        reader.start()
    completed(handle, "mono")
    raw = raw_events(cluster.redis, handle.id)
    assert order_problems(raw) == [], compact(raw)
    rest = [(e["id"], e["type"]) for e in until_final(raw)[len(seen) :]]
    assert rest[0][1] == "job_started" and rest[-1][1] == "final", compact(raw)
    for reader in readers:
        assert [(e["id"], e["type"]) for e in reader.result(120)] == rest, reader.name


def test_a_truncated_job_resumed_with_more_rounds_starts_only_its_new_rounds(stream: Setup) -> None:
    cluster, _, api = stream
    handle = cluster.submit(goal=goal("resume-trunc", never_done=True), reasoner="mono", max_rounds=2)
    assert handle.result(timeout=240).status == "truncated"
    handle.resume(max_rounds=4)
    readers: list[Reader] = [HandleReader(handle), SseReader(api.url, handle.id, drop_after=3)]
    for reader in readers:
        reader.start()
    assert handle.result(timeout=240).status == "truncated"
    raw = check(cluster, handle, readers)
    assert rounds_started(raw) == [0, 1, 2, 3], compact(raw)
    resumed = [e for e in raw if e["type"] == "job_started" and e.get("resumed")]
    assert [e.get("round") for e in resumed] == [2], compact(raw)


def test_a_fork_starts_its_first_round_before_any_event_of_it(stream: Setup) -> None:
    cluster, _, api = stream
    source = submit(cluster, "dual", "fork-source")
    completed(source, "dual")
    before = raw_events(cluster.redis, source.id)
    fork = source.fork(1, goal=goal("fork-child", PARALLEL))
    readers = follow(api, fork)
    completed(fork, "dual")
    raw = check(cluster, fork, readers)
    assert raw[0].get("forked_from") == source.id and raw[0].get("forked_round") == 1, raw[0]
    assert rounds_started(raw) == [1, 2], compact(raw)
    assert raw_events(cluster.redis, source.id) == before


def cancel_mid_reply(
    cluster: Cluster, hosts: Hosts, api: ApiServer, label: str
) -> tuple[JobHandle, list[Reader]]:
    """A mono job cancelled while its actor streams round 1 (the stream then goes on to its end);
    returned once the job ended and the worker is idle, with its live readers."""
    gate = Gate(after=6)
    hosts.fault(label, "actor", 1, gated(gate))
    handle = submit(cluster, "mono", label)
    readers = follow(api, handle)
    poll(
        lambda: gate.reached.is_set() and faults.deltas(cluster, handle.id, 1, "actor"),
        120,
        "round 1's tokens",
    )
    handle.cancel()
    gate.open()
    assert handle.result(timeout=240).status == "cancelled"
    poll(gate.done.is_set, 120, "the cut-off reply to be read to its end")
    for group in cluster.groups:
        faults.idle(cluster, group, "actor")
    return handle, readers


def test_a_job_cancelled_mid_reply_writes_no_token_after_its_final(stream: Setup) -> None:
    cluster, hosts, api = stream
    handle, readers = cancel_mid_reply(cluster, hosts, api, "cancel-mid")
    raw = check(cluster, handle, readers)
    assert [e["type"] for e in raw][-1] == "final", compact(raw)


def test_a_job_cancelled_mid_reply_and_resumed_publishes_each_tool_result_once(stream: Setup) -> None:
    cluster, hosts, api = stream
    handle, _ = cancel_mid_reply(cluster, hosts, api, "cancel-resume")
    handle.resume()
    readers: list[Reader] = [HandleReader(handle), SseReader(api.url, handle.id)]
    for reader in readers:
        reader.start()
    completed(handle, "mono")
    raw = check(cluster, handle, readers)
    assert rounds_started(raw) == [0, 1, 2], compact(raw)
    results = [(e["round"], e["index"]) for e in raw if e["type"] == "tool_result"]
    assert sorted(results) == [(0, 1), (0, 2), (0, 3), (1, 1)], compact(raw)


def test_a_job_cancelled_while_a_call_runs_writes_no_tool_result_after_its_final(stream: Setup) -> None:
    cluster, _, api = stream
    handle = submit(
        cluster, "dual", "cancel-tool", [[{"name": "held", "args": {"key": "cancel-tool"}}, add(1, 1)]]
    )
    readers = follow(api, handle)
    poll(lambda: held_calls(cluster, handle.id, "held_start"), 120, "the held call to start")
    handle.cancel()
    assert handle.result(timeout=240).status == "cancelled"
    cluster.calls.set(RELEASE.format("cancel-tool"), 1, ex=600)
    poll(lambda: held_calls(cluster, handle.id), 120, "the held call to return")
    for group in cluster.groups:
        faults.idle(cluster, group, "tools")
    raw = check(cluster, handle, readers)
    assert raw[-1]["type"] == "final", compact(raw)


def test_a_worker_killed_mid_reply_leaves_a_cut_attempt_and_the_order(faulty: Setup) -> None:
    cluster, hosts, api = faulty
    cuts = {"dual": (1, "thinker", Gate(6)), "mono": (0, "actor", Gate(4)), "react": (1, "actor", Gate(3))}
    for reasoner, (round_no, role, gate) in cuts.items():
        hosts.fault(f"kill-{reasoner}", role, round_no, gated(gate))
    jobs = {r: submit(cluster, r, f"kill-{r}") for r in cuts}
    readers = {r: follow(api, h) for r, h in jobs.items()}
    holders = set()
    for reasoner, (round_no, role, gate) in cuts.items():
        poll(gate.reached.is_set, 120, f"{reasoner}'s {role} stream to reach its gate")
        holders.add(faults.holder_streaming(cluster, jobs[reasoner].id, round_no, role, text=True))
    for pid in holders:
        cluster.kill(*faults.process_of(cluster, pid))
    for _, _, gate in cuts.values():
        gate.open()
    cluster.start("thinker", "actor", name="c")  # the roles whose two workers both died go on
    for reasoner, handle in jobs.items():
        completed(handle, reasoner)
        raw = check(cluster, handle, readers[reasoner])
        round_no, role, _ = cuts[reasoner]
        assert len(attempts(raw, round_no, role)) == 2, compact(raw)
        assert rounds_started(raw) == [0, 1, 2], compact(raw)
    assert cluster.exited() == []


def test_a_worker_paused_past_its_lease_writes_only_late_tokens(faulty: Setup) -> None:
    cluster, hosts, api = faulty
    # dual: paused after its first tokens of round 1; mono: paused before its first token
    for label, reasoner, round_no, role, after, text in (
        ("pause-dual", "dual", 1, "thinker", 6, True),
        ("pause-mono", "mono", 0, "actor", 1, False),
    ):
        gate = Gate(after)
        hosts.fault(label, role, round_no, gated(gate))
        handle = submit(cluster, reasoner, label)
        readers = follow(api, handle)
        poll(gate.reached.is_set, 120, f"{label}'s stream to reach its gate")
        pid = faults.holder_streaming(cluster, handle.id, round_no, role, text=text)
        faults.pause(cluster, pid)
        try:
            completed(handle, reasoner)  # another worker took the step over and ended the job
        finally:
            gate.open()
            faults.resume(pid)
        poll(gate.done.is_set, 120, "the paused worker's reply to be read to its end")
        faults.idle(cluster, *faults.process_of(cluster, pid))
        raw = check(cluster, handle, readers, late_tokens=True)
        assert rounds_started(raw) == [0, 1, 2], compact(raw)
        # The paused worker's tokens are fenced once its step was taken over (docs/events.md,
        # point 4): its attempt shows only by the tokens it wrote before the pause, and one paused
        # before its first may have written none.
        assert len(attempts(raw, round_no, role)) in ({2} if text else {1, 2}), compact(raw)
        assert len(hosts.requests(label, role, round_no)) == 2
    assert cluster.exited() == []


def test_a_paused_workers_tokens_amid_the_takeovers_reply_do_not_mislead_a_reader(faulty: Setup) -> None:
    cluster, hosts, api = faulty
    first, second = Gate(5), Gate(5)
    hosts.fault("amid", "actor", 0, gated(first), gated(second))
    handle = submit(cluster, "mono", "amid")
    readers = follow(api, handle)
    poll(first.reached.is_set, 120, "the first stream to reach its gate")
    pid = faults.holder_streaming(cluster, handle.id, 0, "actor", text=True)
    faults.pause(cluster, pid)
    try:
        poll(second.reached.is_set, 120, "the takeover's stream to reach its gate")
        poll(lambda: len(attempts(raw_events(cluster.redis, handle.id), 0, "actor")) == 2, 120, "its tokens")
    finally:
        first.open()
        faults.resume(pid)
    poll(first.done.is_set, 120, "the paused worker's reply to be read to its end")
    faults.idle(cluster, *faults.process_of(cluster, pid))
    second.open()
    completed(handle, "mono")
    raw = check(cluster, handle, readers, late_tokens=True)
    assert len(attempts(raw, 0, "actor")) == 2, compact(raw)
    assert cluster.exited() == []


def test_a_tools_worker_killed_mid_call_announces_it_again_and_its_result_once(faulty: Setup) -> None:
    cluster, _, api = faulty
    handle = submit(
        cluster, "dual", "kill-tool", [[add(1, 1), {"name": "held", "args": {"key": "kill-tool"}}]]
    )
    readers = follow(api, handle)
    poll(lambda: held_calls(cluster, handle.id, "held_start"), 120, "the held call to start")
    tools = next(g for g in cluster.groups if "tools" in g.roles)
    cluster.kill(tools, "tools")
    cluster.calls.set(RELEASE.format("kill-tool"), 1, ex=600)
    cluster.start("tools", name="c")
    completed(handle, "dual")
    raw = check(cluster, handle, readers)
    announced = [e["attempt"] for e in raw if e["type"] == "tool_call" and (e["round"], e["index"]) == (0, 2)]
    assert announced == [1, 2], compact(raw)
    assert [c["attempt"] for c in held_calls(cluster, handle.id, "held_start")] == [1, 2]
    assert cluster.exited() == []
