"""``TANDEM_REDIS_WAIT_REPLICAS``: the writes that must survive a failover wait for replicas.

Against a throwaway primary and its replica (``tests.integration.redis_sentinel``, no Sentinels):
``MONITOR`` on the primary shows ``WAIT`` right after exactly the ``at_most_once`` start mark, the
decisions, the job's end and a submission, each on the connection of its write; a replica stopped (SIGSTOP)
acknowledges nothing, so ``WAIT`` times out: the write is logged and traced as short, and an
``at_most_once`` tool does not run: its call is put off and runs once the replica is back.
"""

from __future__ import annotations

import importlib
import logging
import threading
import uuid
from collections import deque
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from redis import Redis

from tandem.broker_config import Settings
from tandem.broker_config.errors import SettingsError
from tandem.reasoner import tracing
from tandem.reasoner.demo import calculate
from tandem.tasks import runtime as runtime_module
from tandem.tasks.app import app
from tandem.tasks.runtime import Runtime
from tandem.tasks.state.machine import SCRIPTS, JobMachine
from tandem.tasks.state.replicas import WAIT_SHORT_EVENT, ReplicaWait, Waited
from tandem.tasks.state.scripts import lua
from tandem.tasks.state.store import JobStore
from tandem.toolkit import Action, Tool, ToolkitService
from tests.integration.redis_sentinel import OwnSentinelGroup, SentinelUnsupported
from tests.tasks.test_jobstate import JOB, LEASE, call, claim, to_tools

RUNS: list[str] = []
"""The expressions the ``at_most_once`` tool below evaluated, in this process."""


def charge(expression: str) -> float:
    """Evaluate an arithmetic expression (a side effect that must never happen twice).

    Args:
        expression: the expression.
    """
    RUNS.append(expression)
    return calculate(expression)


def _toolkit() -> Any:
    service = ToolkitService()
    work = Action("work", "work", "Do the work the task needs")
    service.add_action(work, [], [])
    service.add_tool(Tool.from_function(charge, name="calculate", at_most_once=True), [(work, 1.0)])
    return service.get_toolkit()


toolkit = _toolkit()
"""The demo model's ``calculate``, ``at_most_once``."""


@pytest.fixture(scope="module")
def pair() -> Iterator[OwnSentinelGroup]:
    try:
        group = OwnSentinelGroup().start_pair()
    except SentinelUnsupported as exc:
        pytest.skip(f"no primary and replica can be started: {exc}")
    yield group
    group.stop()


@pytest.fixture
def primary(pair: OwnSentinelGroup) -> Iterator[Redis]:
    client = Redis(host="127.0.0.1", port=pair.primary_port)
    client.flushall()
    yield client
    pair.resume(pair.replica_port)
    client.close()


def machine_on(client: Redis, replicas: int, timeout_ms: int = 5000) -> JobMachine:
    return JobStore(
        client, prefix=f"t-{uuid.uuid4().hex[:6]}", ttl=600, wait=ReplicaWait(replicas, timeout_ms)
    ).machine


class Monitor:
    """``MONITOR`` on the primary until ``ECHO stop-monitor``: every command with its client."""

    def __init__(self, pair: OwnSentinelGroup) -> None:
        self.client = Redis(host="127.0.0.1", port=pair.primary_port)
        self.seen: list[dict[str, Any]] = []
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._listen)

    def _listen(self) -> None:
        with self.client.monitor() as m:
            self.ready.set()
            for entry in m.listen():
                if entry["command"] == "ECHO stop-monitor":
                    return
                self.seen.append(entry)

    def __enter__(self) -> Monitor:
        self.thread.start()
        self.ready.wait(10)
        self.client.ping()  # MONITOR is on once a command of another client shows up
        return self

    def __exit__(self, *_: object) -> None:
        self.client.echo("stop-monitor")
        self.thread.join(10)


def test_settings_read_the_wait_and_refuse_what_cannot_work() -> None:
    assert (Settings.from_env({}).redis_wait_replicas, Settings.from_env({}).redis_wait_timeout_ms) == (
        0,
        1000,
    )
    read = Settings.from_env({"TANDEM_REDIS_WAIT_REPLICAS": "2", "TANDEM_REDIS_WAIT_TIMEOUT_MS": "250"})
    assert (read.redis_wait_replicas, read.redis_wait_timeout_ms) == (2, 250)
    with pytest.raises(SettingsError, match="TANDEM_REDIS_WAIT_REPLICAS='-1'"):
        Settings.from_env({"TANDEM_REDIS_WAIT_REPLICAS": "-1"})
    with pytest.raises(SettingsError, match=r"TANDEM_REDIS_WAIT_TIMEOUT_MS=30000 is not under"):
        Settings.from_env({"TANDEM_REDIS_WAIT_TIMEOUT_MS": "30000"})
    with pytest.raises(SettingsError, match="TANDEM_REDIS_WAIT_TIMEOUT_MS='0'"):
        Settings.from_env({"TANDEM_REDIS_WAIT_TIMEOUT_MS": "0"})


def test_wait_follows_exactly_the_writes_that_must_survive_on_their_own_connection(
    pair: OwnSentinelGroup, primary: Redis
) -> None:
    machine = machine_on(primary, 1)
    # loaded first: no EVALSHA refused with NOSCRIPT in the way
    sha = {name: primary.script_load(lua(name)) for name in SCRIPTS}
    with Monitor(pair) as monitor:
        to_tools(machine, 1)  # create, claim, transition: no wait
        held = call(machine, 1)
        assert machine.call_started(held)[0]
        assert (
            machine.call_done(held, '{"index": 1}', [{"task": "tandem.collect_tools", "args": [JOB, 0]}]) == 2
        )
        collect = claim(machine, 0, "collect")
        assert machine.settle(JOB, 0, "{}", "{}", complete=False, rejected=[], approved=[], collect=[])[
            0
        ] == ("not-waiting")
        assert machine.finish(JOB, '{"status": "completed"}', "completed", "", 600, collect)
    names = {v: k for k, v in sha.items()}
    sent = [
        e
        for e in monitor.seen
        if e.get("client_type") != "lua" and e["command"].startswith(("EVALSHA", "WAIT"))
    ]
    order = [names[e["command"].split()[1]] if e["command"].startswith("EVALSHA") else "WAIT" for e in sent]
    scripts = [o for o in order if o != "WAIT"]
    assert scripts == [
        "create",
        "claim",
        "transition",
        "claim_call",
        "call_started",
        "call_done",
        "claim",
        "settle",
        "finish",
    ]
    waits = [i for i, o in enumerate(order) if o == "WAIT"]
    assert [order[i - 1] for i in waits] == ["call_started", "settle", "finish"]
    for i in waits:  # on the connection that ran the script, asking for 1 replica for 5 s
        assert sent[i]["command"] == "WAIT 1 5000"
        assert (sent[i]["client_address"], sent[i]["client_port"]) == (
            sent[i - 1]["client_address"],
            sent[i - 1]["client_port"],
        )


def test_without_replicas_asked_nothing_waits(pair: OwnSentinelGroup, primary: Redis) -> None:
    machine = machine_on(primary, 0)
    with Monitor(pair) as monitor:
        to_tools(machine, 1)
        held = call(machine, 1)
        assert machine.call_started(held) == (True, None)
        assert machine.finish(JOB, "{}", "failed", "x", 600)
    assert not [e for e in monitor.seen if e["command"].startswith("WAIT")]


def test_a_short_wait_is_logged_and_traced(
    pair: OwnSentinelGroup, primary: Redis, spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    machine = machine_on(primary, 1, timeout_ms=200)
    to_tools(machine, 1)
    held = call(machine, 1)
    assert machine.call_started(held) == (True, Waited("the start mark of call 1 of round 0", JOB, 1, 1))
    pair.pause(pair.replica_port)  # acknowledges nothing from now on
    with caplog.at_level(logging.WARNING, "tandem.redis"), tracing.span("test") as span:
        assert span is not None
        marked, waited = machine.call_started(held)
    assert marked and waited == Waited("the start mark of call 1 of round 0", JOB, 1, 0) and waited.short
    assert [r.getMessage() for r in caplog.records] == [
        f"job {JOB}: the start mark of call 1 of round 0 was acknowledged by 0 of 1 replicas within 200 ms "
        "(TANDEM_REDIS_WAIT_REPLICAS); a failover now could lose it"
    ]
    (done,) = spans.get_finished_spans()
    assert done.attributes is not None
    assert (
        done.attributes["tandem.redis.wait_replicas"],
        done.attributes["tandem.redis.replicas_acked"],
    ) == (1, 0)
    assert [(e.name, dict(e.attributes or {})) for e in done.events] == [
        (
            WAIT_SHORT_EVENT,
            {
                "tandem.redis.write": "the start mark of call 1 of round 0",
                "tandem.redis.wait_replicas": 1,
                "tandem.redis.replicas_acked": 0,
            },
        )
    ]
    # Taking the mark back lets the call's lease go without counting an expiry.
    assert machine.call_unstarted(held)
    calls = {k.decode(): v.decode() for k, v in primary.hgetall(machine.store.key(JOB, "calls")).items()}
    assert ("1:started" in calls, calls["1:holder"], calls.get("1:expiries")) == (False, "", None)
    again = machine.claim_call(JOB, 0, 1, LEASE, 5)
    assert (again.attempt, again.started) == (2, False)  # type: ignore[union-attr]
    assert not machine.call_unstarted(held)  # a claim lost meanwhile takes nothing back


# -- the tool step, in this thread --------------------------------------------------------


Sent = deque[tuple[str, list[Any], dict[str, Any]]]


@pytest.fixture
def rt(pair: OwnSentinelGroup, primary: Redis, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    for module in app.conf.imports:  # the tasks and their signal handlers, as a worker has them
        importlib.import_module(module)
    settings = Settings(
        redis_url=f"redis://127.0.0.1:{pair.primary_port}/0",
        toolkit="tests.tasks.test_replica_wait:toolkit",
        lease_seconds=30.0,
        stall_seconds=60.0,
        memory_ttl=600,
        redis_wait_replicas=1,
        redis_wait_timeout_ms=200,
    )
    runtime = Runtime(settings)
    runtime.__dict__["redis"] = primary
    monkeypatch.setattr(runtime_module, "_runtime", runtime)
    RUNS.clear()
    yield runtime


def capture(monkeypatch: pytest.MonkeyPatch) -> Sent:
    queue: Sent = deque()

    def send_task(name: str, args: Any = None, kwargs: Any = None, **kw: Any) -> None:
        queue.append((name, list(args or []), kw))

    monkeypatch.setattr(app, "send_task", send_task)
    return queue


def drain(queue: Sent, until: str | None = None) -> list[str]:
    """Apply the messages in order (``until``: stop before the first message of that task)."""
    ran = []
    while queue:
        if until is not None and queue[0][0] == until:
            break
        name, args, _ = queue.popleft()
        app.tasks[name].apply(args=args)
        ran.append(name)
    return ran


def test_a_mark_the_replicas_did_not_take_in_time_runs_no_tool_and_the_call_runs_later(
    rt: Runtime,
    pair: OwnSentinelGroup,
    primary: Redis,
    spans: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    queue = capture(monkeypatch)
    job = "wait-job-1"
    app.tasks["tandem.infer"].apply(
        kwargs={"spec": {"goal": "What is 17 * 23?"}}, task_id=job, ignore_result=True
    )
    drain(queue, until="tandem.run_tool")
    assert queue and queue[0][0] == "tandem.run_tool"
    pair.pause(pair.replica_port)
    with caplog.at_level(logging.WARNING):
        name, args, _ = queue.popleft()
        app.tasks[name].apply(args=args)
    assert RUNS == []  # the tool did not run
    calls = {k.decode(): v.decode() for k, v in primary.hgetall(rt.store.key(job, "calls")).items()}
    assert ("1:started" in calls, calls["1:holder"], calls["1:attempts"]) == (False, "", "1")
    record = rt.machine.record(job)
    assert (record["state"], record["kind"]) == ("running", "tools")
    assert (
        "reached 0 of 1 replicas within 200 ms (TANDEM_REDIS_WAIT_REPLICAS): the tool did not run"
        in (record["last_error"])
    )
    (again,) = list(queue)  # the call, sent again after a back-off
    assert (again[0], again[1], 0.5 <= again[2]["countdown"] <= 1.0) == ("tandem.run_tool", [job, 0, 1], True)
    put_off = [r.getMessage() for r in caplog.records if "the tool did not run" in r.getMessage()]
    assert len(put_off) == 1 and put_off[0].startswith(f"job {job}: the start mark of at_most_once call 1")
    tool_step = [s for s in spans.get_finished_spans() if s.name == "tandem.step"][-1]
    assert tool_step.attributes is not None and tool_step.attributes["tandem.commit"] == "put off"
    assert [e.name for e in tool_step.events] == [WAIT_SHORT_EVENT]

    pair.resume(pair.replica_port)
    drain(queue)
    assert RUNS == ["17 * 23"]  # once, on the next attempt
    assert rt.store.result(job).status == "completed"  # type: ignore[union-attr]


def test_a_submission_indexes_its_job_before_it_stores_its_record(
    pair: OwnSentinelGroup, primary: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failover keeps a prefix of the writes: a ``queued`` record that survived has its index
    entry, so the reconciler sends its lost intake message again (never stuck queued)."""
    from tandem.client.submission import submit

    sent: list[str] = []
    monkeypatch.setattr(app, "send_task", lambda name, *a, **kw: sent.append(name))
    store = JobStore(primary, prefix=f"t-{uuid.uuid4().hex[:6]}", ttl=600, wait=ReplicaWait(1, 5000))
    with Monitor(pair) as monitor:
        handle = submit({"goal": "g"}, app=app, store=store)
    seen = [e for e in monitor.seen if e["command"].split()[0] in ("ZADD", "HSETNX", "WAIT")]
    words = [e["command"].split()[0] for e in seen]
    live = store.machine.shard_key(store.machine.shard_of(handle.id))
    assert seen[0]["command"].startswith(f"ZADD {live} ")  # the live index first
    assert words.index("HSETNX") < words.index("WAIT") == len(words) - 1  # then the record, then the wait
    wait, last = seen[-1], seen[-2]  # on the connection of the submission's last write
    assert (wait["command"], last["command"].split()[0]) == ("WAIT 1 5000", "ZADD")
    assert (wait["client_address"], wait["client_port"]) == (last["client_address"], last["client_port"])
    assert sent == ["tandem.infer"] and store.machine.record(handle.id)["state"] == "queued"
