"""Attacks on "The job's record" (docs/durability.md), written from the docs alone: where the broker
is the job state's own Redis, a step's commit pushes the next step's messages to their queues in the
same script call, and the record's creation pushes the first step and writes ``job_started``.

"So the step is stored and its successor queued in one call, or neither happens, and the outbox
stays empty: there is no moment when a worker has committed but not yet sent."

How it is attacked, on real ``celery worker`` processes and a real Redis:

- the record and the queue lists are read together in one ``MULTI`` (Redis runs it between two
  other commands, never inside a script), again and again while steps commit with no worker of
  the next role: every snapshot that shows a step current must show its message queued, its
  outbox empty and (after the creation) ``job_started`` first in the stream. The committing worker
  reaches Redis through a ``SlowLink`` (30 ms each way), so a commit followed by a separate send
  would leave a window of 60 ms or more: the same watch, pointed at ``collect`` (whose message
  stays in the outbox until it commits, as documented), sees that window at once;
- each message lies in its priority's list (``JobSpec.priority`` p -> kombu level 9 - p,
  docs/distributed.md) and is shaped as the app's own ``send_task`` shapes a message;
- a broker on another database of the same server: nothing lands in the job state's database;
- the Actor and Thinker workers SIGKILLed and replaced while 16 jobs run tools;
- intake messages sent two and three times (a bare client's task id, a copied ``submit`` message);
- signing on: the pushed messages carry the seal of their own task id, a replay of one is refused;
- tracing on: the pushed message carries the job's trace.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from tests.integration import plan_model
from tests.integration.breaking import (
    FAST,
    SMALL,
    checked,
    each_event_once,
    ended,
    jobs_with_charges,
    own_cluster,
    plan_jobs,
    poll,
)
from tests.integration.breaking_pushes import (
    ONE_ROUND,
    ROLE_QUEUES,
    SEP,
    THREE_CALLS,
    at_step,
    body_of,
    cluster_on_db,
    completed,
    delayed,
    drained,
    job_of,
    level_of,
    list_keys,
    messages_of,
    outbox_of,
    queued,
    requests_of,
    resent,
    send_bare,
    shape,
    signing_env,
    slow_env,
    watch_commits,
)
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, _exclusive_db, actor_host
from tests.integration.otlp_receiver import OtlpReceiver
from tests.integration.plan_model import goal_with_plan
from tests.openai_server import Reply

pytestmark = pytest.mark.integration

# -- 1. the default deployment: a commit queues its successor in the same instant -----------


def test_a_committed_actor_step_is_queued_in_the_same_instant(redis_base: str) -> None:
    with cluster_on_db(redis_base) as (cluster, _, actor), slow_env(cluster) as slow:
        cluster.start("tools")
        cluster.start("thinker", name="slow", **slow)  # no Actor worker: each actor step waits queued
        priorities: list[int | None] = [0, 2, 7, 9, None, 5]
        handles = [
            cluster.submit(goal=goal_with_plan(f"pushed {i}", ONE_ROUND), max_rounds=4)
            if p is None
            else cluster.submit(goal=goal_with_plan(f"pushed {i}", ONE_ROUND), max_rounds=4, priority=p)
            for i, p in enumerate(priorities)
        ]
        jobs = [h.id for h in handles]
        seen, broken = watch_commits(cluster, jobs, ("actor",), at_step("actor", jobs), 60)
        assert broken == [], f"committed without the actor message queued with it: {broken}"
        assert seen >= len(jobs)

        captured: list[tuple[str, bytes]] = []
        for job, p in zip(jobs, priorities, strict=True):
            found = messages_of(cluster.redis, "actor", job)
            want = level_of(5 if p is None else p)
            assert [level for level, _ in found] == [want], f"job of priority {p}: levels {found}"
            ((_, message),) = found
            assert message["headers"]["task"] == "tandem.actor_turn"
            assert message["properties"]["priority"] == want
            assert message["properties"]["delivery_info"]["routing_key"] == "actor"
            assert body_of(message)[0] == [job, 0]
            assert outbox_of(cluster, job) == "[]"
            key = list_keys("actor")[want]
            captured += [(key, raw) for raw in cluster.redis.lrange(key, 0, -1) if job_of(raw) == job]
        assert all(not raws for raws in queued(cluster.redis, "thinker").values())

        # The same step sent by the app's own send_task, to a queue nobody reads: the same shape.
        reference = cluster.app.send_task(
            "tandem.actor_turn",
            args=[jobs[0], 0],
            queue="reference",
            priority=level_of(0),
            ignore_result=True,
        )
        raws = [r for rs in queued(cluster.redis, "reference").values() for r in rs]
        assert len(raws) == 1, f"the reference message {reference.id} is not where it was sent"
        pushed = json.loads(captured[0][1])
        assert shape(pushed) == shape(json.loads(raws[0]))
        every = [json.loads(raw) for _, raw in captured]
        assert len({m["properties"]["delivery_tag"] for m in every}) == len(jobs)
        assert all(m["properties"]["correlation_id"] == m["headers"]["id"] for m in every)
        assert body_of(pushed)[1:] == body_of(json.loads(raws[0]))[1:]  # kwargs and embed
        cluster.redis.delete(*list_keys("reference"))

        cluster.start("actor")
        completed(cluster, handles, RESULT_SECONDS)
        assert requests_of(actor, "pushed 0") == 2

        # The captured round-0 messages, queued again after the end, change nothing.
        before = (len(actor.requests), [cluster.store.result(j) for j in jobs])
        memories = [[(m.round, m.role) for m in cluster.store.memory(j).get_messages()] for j in jobs]
        for key, raw in captured:
            cluster.redis.lpush(key, raw)
        poll(lambda: drained(cluster.redis, ("actor",)), EVENT_SECONDS, "the replayed messages to be taken")
        time.sleep(1.5)
        assert (len(actor.requests), [cluster.store.result(j) for j in jobs]) == before
        assert [[(m.round, m.role) for m in cluster.store.memory(j).get_messages()] for j in jobs] == memories


# -- 2. the record's creation: the first step queued and job_started written with it ---------


def test_the_records_creation_queues_the_first_step_and_writes_job_started(redis_base: str) -> None:
    with cluster_on_db(redis_base) as (cluster, thinker, _), slow_env(cluster) as slow:
        cluster.start("tools", **slow)  # it takes the intake queue: every first step waits in its queue
        dual = [
            (cluster.submit(goal=goal_with_plan(f"created {p}", ONE_ROUND), max_rounds=4, priority=p), p)
            for p in (9, 5, 1)
        ]
        mono = cluster.submit(goal=goal_with_plan("created mono", ONE_ROUND), reasoner="mono", priority=4)
        spec = {"goal": goal_with_plan("created bare", ONE_ROUND), "max_rounds": 4, "priority": 8}
        bare_ids = [send_bare(cluster, spec) for _ in range(2)]
        jobs = [h.id for h, _ in dual] + [mono.id, *bare_ids]

        def created(records: dict[str, Any]) -> bool:
            return all(records[j][0] == "running" for j in jobs)

        seen, broken = watch_commits(cluster, jobs, ("thinker", "actor"), created, 60)
        assert broken == [], f"a record created without its first step queued or job_started: {broken}"
        assert seen >= len(jobs)

        expected = {h.id: ("thinker", level_of(p)) for h, p in dual}
        expected[mono.id] = ("actor", level_of(4))
        expected.update({j: ("thinker", level_of(8)) for j in bare_ids})
        for job, (queue, level) in expected.items():
            found = messages_of(cluster.redis, queue, job)
            assert [lv for lv, _ in found] == [level], f"{job}: {queue} levels {[lv for lv, _ in found]}"
            assert found[0][1]["headers"]["task"] == f"tandem.{queue}_turn"
            assert body_of(found[0][1])[0] == [job, 0]
            assert outbox_of(cluster, job) == "[]"
            kinds = [e.type for e in cluster.store.read_events(job)]
            assert kinds == ["job_started"], f"{job}: {kinds}"

        cluster.start("thinker", "actor")
        for j in bare_ids:
            assert cluster.app.AsyncResult(j).get(timeout=RESULT_SECONDS)["status"] == "completed"
        completed(cluster, [h for h, _ in dual], RESULT_SECONDS)
        assert mono.result(timeout=RESULT_SECONDS).status == "completed"
        for job in [mono.id, *bare_ids]:
            kinds = [e.type for e in cluster.store.read_events(job, count=1000)]
            assert kinds[0] == "job_started" and kinds.count("job_started") == 1, kinds
            assert outbox_of(cluster, job) == "[]"
        assert requests_of(thinker, "created bare") == 4  # two jobs, two Thinker turns each


# -- 3. kills and replacements: nothing lost, nothing twice, no outbox left -----------------


def test_killed_and_replaced_workers_lose_nothing_and_leave_no_outbox() -> None:
    with own_cluster(FAST) as ((cluster, _, _), _server):
        first = cluster.start("thinker", "actor", "tools", concurrency=SMALL)
        handles = plan_jobs(cluster, 16, "pushed chaos")
        poll(lambda: jobs_with_charges(cluster, 2), EVENT_SECONDS, "two jobs in their first tool round")
        cluster.kill(first, "actor")
        second = cluster.start("actor", name="actor-2", concurrency={"actor": 2})
        poll(lambda: jobs_with_charges(cluster, 6), EVENT_SECONDS, "six jobs in their first tool round")
        cluster.kill(first, "thinker")
        cluster.start("thinker", name="thinker-2", concurrency={"thinker": 2})
        time.sleep(3)
        cluster.kill(second, "actor")
        cluster.start("actor", name="actor-3", concurrency={"actor": 2})
        ended(cluster, handles, RESULT_SECONDS)
        checked(cluster, handles)
        for h in handles:
            record = cluster.store.machine.record(h.id)
            assert record["state"] == "completed" and outbox_of(cluster, h.id) == "[]", record
            assert each_event_once(cluster, h.id) == []
        poll(lambda: drained(cluster.redis), EVENT_SECONDS, "every queue to drain")


# -- 4. a broker on another database: the outbox path, nothing in the state's database ------


def test_a_broker_on_another_database_gets_every_message(redis_base: str) -> None:
    with _exclusive_db() as broker_db:
        broker_url = f"{redis_base}/{broker_db}"
        broker = Redis.from_url(broker_url)
        broker.flushdb()
        try:
            with cluster_on_db(redis_base, TANDEM_BROKER_URL=broker_url) as (cluster, _, _):
                assert cluster.url != broker_url
                cluster.start("thinker", "tools")
                handles = [
                    cluster.submit(goal=goal_with_plan(f"elsewhere {p}", ONE_ROUND), max_rounds=4, priority=p)
                    for p in (9, 5, 1)
                ]
                jobs = [h.id for h in handles]
                poll(
                    lambda: all(cluster.store.machine.record(j).get("kind") == "actor" for j in jobs),
                    EVENT_SECONDS,
                    "every job at its actor step",
                )
                poll(
                    lambda: all(len(messages_of(broker, "actor", j)) == 1 for j in jobs),
                    10,
                    "every actor step in the broker's database",
                )
                for h, p in zip(handles, (9, 5, 1), strict=True):
                    assert [lv for lv, _ in messages_of(broker, "actor", h.id)] == [level_of(p)]
                in_state_db = [
                    k
                    for k in cluster.redis.scan_iter()
                    if k.decode(errors="replace").split(SEP)[0] in (*ROLE_QUEUES, "unacked")
                ]
                assert in_state_db == [], f"queue lists in the job state's database: {in_state_db}"

                cluster.start("actor")
                completed(cluster, handles, RESULT_SECONDS)
                poll(lambda: drained(broker), EVENT_SECONDS, "the broker's queues to drain")
                in_state_db = [
                    k
                    for k in cluster.redis.scan_iter()
                    if k.decode(errors="replace").split(SEP)[0] in ROLE_QUEUES
                ]
                assert in_state_db == [], f"queue lists in the job state's database: {in_state_db}"
        finally:
            broker.flushdb()


# -- 5. one job and one first step for an intake message sent several times -----------------


def test_an_intake_sent_three_times_makes_one_job_and_one_first_step(redis_base: str) -> None:
    with cluster_on_db(redis_base) as (cluster, thinker, actor):
        # No worker yet: every intake copy waits, then one worker takes them all at once.
        handle = cluster.submit(goal=goal_with_plan("twice by submit", ONE_ROUND), max_rounds=4)
        ((level, raw),) = [
            (lv, r)
            for lv, raws in queued(cluster.redis, "celery").items()
            for r in raws
            if job_of(r) == handle.id
        ]
        for _ in range(2):  # the same message, as a broker hands it out again
            copy = json.loads(raw)
            copy["properties"]["delivery_tag"] = str(uuid.uuid4())
            cluster.redis.lpush(list_keys("celery")[level], json.dumps(copy))
        bare_id = str(uuid.uuid4())
        spec = {"goal": goal_with_plan("thrice by id", ONE_ROUND), "max_rounds": 4}
        for _ in range(3):
            assert send_bare(cluster, spec, task_id=bare_id) == bare_id
        assert sum(len(r) for r in queued(cluster.redis, "celery").values()) == 6

        cluster.start("tools", concurrency={"tools": 4})  # takes the six intake messages, in parallel
        poll(
            lambda: drained(cluster.redis, ("celery",)) and not cluster.redis.hlen("unacked"),
            EVENT_SECONDS,
            "the intakes",
        )
        time.sleep(1.0)
        for job in (handle.id, bare_id):
            assert len(messages_of(cluster.redis, "thinker", job)) == 1, messages_of(
                cluster.redis, "thinker", job
            )
            kinds = [e.type for e in cluster.store.read_events(job)]
            assert kinds == ["job_started"], f"{job}: {kinds}"
        specs = sorted(k.decode() for k in cluster.redis.scan_iter(match=f"{cluster.settings.prefix}:*:spec"))
        assert specs == sorted(cluster.store.key(j, "spec") for j in (handle.id, bare_id))

        cluster.start("thinker", "actor")
        completed(cluster, [handle], RESULT_SECONDS)
        assert cluster.app.AsyncResult(bare_id).get(timeout=RESULT_SECONDS)["status"] == "completed"
        kinds = [e.type for e in cluster.store.read_events(bare_id, count=1000)]
        assert kinds[0] == "job_started" and kinds.count("job_started") == 1, kinds
        for label in ("twice by submit", "thrice by id"):
            assert (requests_of(thinker, label), requests_of(actor, label)) == (2, 2), label
        adds = [c for c in cluster.tool_calls() if c["job"] in (handle.id, bare_id)]
        assert sorted(c["job"] for c in adds) == sorted([handle.id, bare_id]), adds


# -- 6. signing: the pushed messages are sealed for their own id, a replay is refused --------


def test_pushed_messages_are_sealed_and_a_replay_of_one_is_refused(redis_base: str, tmp_path: Path) -> None:
    with cluster_on_db(redis_base, **signing_env(tmp_path)) as (cluster, _, actor):
        cluster.start("thinker", "tools")
        handles = [
            cluster.submit(goal=goal_with_plan(f"sealed {i}", ONE_ROUND), max_rounds=4) for i in range(3)
        ]
        jobs = [h.id for h in handles]
        seen, broken = watch_commits(cluster, jobs, ("actor",), at_step("actor", jobs), 60)
        assert broken == [] and seen >= len(jobs), broken
        captured: list[tuple[str, bytes]] = []
        for job in jobs:
            ((level, message),) = messages_of(cluster.redis, "actor", job)
            assert level == level_of(5)
            signed = base64.b64decode(base64.b64decode(message["body"])).decode(errors="replace")
            task_id = message["headers"]["id"]
            assert '"tandem_seal": {"id": "' + task_id in signed, (
                f"{job}: no seal of {task_id} in {signed[:300]}"
            )
            key_ = list_keys("actor")[level]
            captured += [(key_, raw) for raw in cluster.redis.lrange(key_, 0, -1) if job_of(raw) == job]

        cluster.start("actor")
        completed(cluster, handles, RESULT_SECONDS)
        before = (len(actor.requests), [cluster.store.result(j) for j in jobs])
        for key_, raw in captured:
            cluster.redis.lpush(key_, raw)
        poll(lambda: drained(cluster.redis, ("actor",)), EVENT_SECONDS, "the replays to be taken")

        def refusals() -> int:
            text = "".join(
                p.read_text(errors="replace") for g in cluster.groups for p in g.log_dir.glob("*.log")
            )
            return text.count("message refused, nothing done: tandem.actor_turn")

        poll(lambda: refusals() >= len(captured), EVENT_SECONDS, "one refusal per replayed message")
        assert (len(actor.requests), [cluster.store.result(j) for j in jobs]) == before


# -- 7. tracing: the pushed message carries the job's trace -------------------------------


def test_a_pushed_step_carries_the_jobs_trace(redis_base: str) -> None:
    with OtlpReceiver() as receiver:
        otel = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_SERVICE_NAME": "tandem-worker",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }
        with cluster_on_db(redis_base, **otel) as (cluster, _, _):
            workers = cluster.start("thinker", "tools")
            # A bare client: the intake opens the job's trace.
            job = send_bare(cluster, {"goal": goal_with_plan("traced", ONE_ROUND), "max_rounds": 4})
            poll(lambda: messages_of(cluster.redis, "actor", job), EVENT_SECONDS, "the actor step queued")
            ((_, message),) = messages_of(cluster.redis, "actor", job)
            traceparent = message["headers"].get("traceparent")
            assert traceparent, f"no traceparent in the pushed message's headers: {message['headers']}"
            trace_id = str(traceparent).split("-")[1]

            late = cluster.start("actor")
            assert cluster.app.AsyncResult(job).get(timeout=RESULT_SECONDS)["status"] == "completed"
            for group in (late, workers):
                cluster.stop_group(group)  # a warm shutdown exports what each worker holds

            def actor_step() -> list[Any]:
                return [
                    s
                    for s in receiver.spans()
                    if s.name == "tandem.step"
                    and s.attributes.get("tandem.job_id") == job
                    and s.attributes.get("tandem.step.kind") == "actor"
                    and s.attributes.get("tandem.round") == 0
                ]

            spans = poll(actor_step, EVENT_SECONDS, "the actor step's span")
            assert {s.trace_id for s in spans} == {trace_id}
            job_spans = [s for s in receiver.spans() if s.attributes.get("tandem.job_id") == job]
            assert {s.trace_id for s in job_spans} == {trace_id}, "the job is not one trace"


# -- 8. a pushed message lost from its queue: the reconciler sends the step again -------------


def test_a_pushed_message_lost_from_its_queue_is_sent_again(redis_base: str) -> None:
    """The outbox stays empty when the commit pushes: a message then lost (deleted from its list)
    must still be sent again by the reconciler (no progress for ``TANDEM_STALL_SECONDS``), one
    priority level up, for the first step (pushed at creation) and for a committed one."""
    with cluster_on_db(redis_base, **FAST) as (cluster, _, _):
        cluster.start("tools", concurrency={"tools": 2})
        priorities = (5, 9, 2)
        handles = [
            cluster.submit(goal=goal_with_plan(f"lost {p}", ONE_ROUND), max_rounds=4, priority=p)
            for p in priorities
        ]
        jobs = [h.id for h in handles]
        poll(lambda: resent(cluster, "thinker", jobs), EVENT_SECONDS, "every first step queued")
        lost_at = time.monotonic()
        cluster.redis.delete(*list_keys("thinker"))
        again = poll(
            lambda: resent(cluster, "thinker", jobs), EVENT_SECONDS, "the lost first steps sent again"
        )
        assert time.monotonic() - lost_at >= 2.0, "sent again before any stall: it was never lost?"
        for job, p in zip(jobs, priorities, strict=True):
            assert set(again[job]) == {max(0, level_of(p) - 1)}, (p, again[job])

        cluster.start("thinker")
        poll(lambda: resent(cluster, "actor", jobs), EVENT_SECONDS, "every actor step queued")
        cluster.redis.delete(*list_keys("actor"))
        again = poll(lambda: resent(cluster, "actor", jobs), EVENT_SECONDS, "the lost actor steps sent again")
        for job, p in zip(jobs, priorities, strict=True):
            assert set(again[job]) == {max(0, level_of(p) - 1)}, (p, again[job])
            record = cluster.store.machine.record(job)
            assert (record["state"], record["kind"], record["round"]) == ("running", "actor", "0"), record

        cluster.start("actor")
        completed(cluster, handles, RESULT_SECONDS)


# -- 9. a tool round: the Actor's commit pushes every run_tool message ------------------------


def test_the_actors_commit_pushes_every_call_of_the_round(redis_base: str) -> None:
    with cluster_on_db(redis_base) as (cluster, _, _), slow_env(cluster) as slow:
        cluster.start("thinker")
        cluster.start("actor", name="slow", **slow)  # no tools worker: the round's calls wait queued
        priorities = (3, 8)
        handles = [
            cluster.submit(goal=goal_with_plan(f"fan out {p}", THREE_CALLS), max_rounds=4, priority=p)
            for p in priorities
        ]
        jobs = [h.id for h in handles]
        seen, broken = watch_commits(cluster, jobs, ("tools",), at_step("tools", jobs), 60, {"tools": 3})
        assert broken == [], f"a tool round committed without its three calls queued: {broken}"
        assert seen >= len(jobs)
        for job, p in zip(jobs, priorities, strict=True):
            found = messages_of(cluster.redis, "tools", job)
            assert {lv for lv, _ in found} == {level_of(p)}, (p, found)
            assert all(m["headers"]["task"] == "tandem.run_tool" for _, m in found)
            assert sorted(body_of(m)[0][2] for _, m in found) == [1, 2, 3]
            assert {tuple(body_of(m)[0][:2]) for _, m in found} == {(job, 0)}
            assert outbox_of(cluster, job) == "[]"
        every = [m for j in jobs for _, m in messages_of(cluster.redis, "tools", j)]
        assert len({m["properties"]["delivery_tag"] for m in every}) == len(every) == 6
        assert len({m["headers"]["id"] for m in every}) == 6
        assert all(m["properties"]["correlation_id"] == m["headers"]["id"] for m in every)

        # kombu's "unacked" copy for every queue: each pushed message must be a message kombu can
        # hold and acknowledge by its own delivery tag.
        cluster.start("tools", TANDEM_BROKER_ACK_EMULATION="true")
        completed(cluster, handles, RESULT_SECONDS)
        poll(
            lambda: not cluster.redis.hlen("unacked"),
            EVENT_SECONDS,
            "kombu's unacked copies to be acknowledged",
        )
        calls = [c for c in cluster.tool_calls() if c["job"] in jobs]
        assert sorted((c["job"], c["index"], c["attempt"]) for c in calls) == sorted(
            (j, i, 1) for j in jobs for i in (1, 2, 3)
        )


# -- 10. a step that waits for a countdown: the outbox path, and the job still ends -----------


def test_a_step_parked_with_a_countdown_runs_once_and_leaves_no_outbox(redis_base: str) -> None:
    with cluster_on_db(redis_base) as (cluster, _, actor):
        refused: list[str] = []

        def busy_once(request: Any) -> Reply:
            if "parked" in json.dumps(request["messages"]) and not refused:
                refused.append("429")
                return Reply(content="", status=429, headers={"Retry-After": "7"})
            return actor_host(request)

        actor.set_script(busy_once)
        cluster.start("thinker", "actor", "tools")
        handle = cluster.submit(goal=goal_with_plan("parked", ONE_ROUND), max_rounds=4, priority=7)
        poll(lambda: handle.status().state == "waiting", EVENT_SECONDS, "the actor step parked")
        assert handle.status().step == "actor"
        completed(cluster, [handle], RESULT_SECONDS)
        assert requests_of(actor, "parked") == 3  # the 429, then one reply per round
        kinds = [e.type for e in cluster.store.read_events(handle.id, count=1000)]
        assert "waiting" in kinds, kinds
        assert [(m.round, m.role) for m in cluster.store.memory(handle.id).get_messages()] == [
            (0, "thinker"),
            (0, "actor"),
            (0, "tool"),
            (1, "thinker"),
            (1, "actor"),
        ]


# -- 11. a fork's new record and a resumed one: one first step each -------------------------


def test_a_fork_and_a_resume_queue_their_first_step_once(redis_base: str) -> None:
    with cluster_on_db(redis_base) as (cluster, _, _):
        cluster.start("actor", "tools")
        thinkers = cluster.start("thinker", name="thinkers")
        source = cluster.submit(goal=goal_with_plan("forked", ONE_ROUND), max_rounds=1)
        assert source.result(timeout=RESULT_SECONDS).status == "truncated"
        cluster.stop_group(thinkers)  # the next Thinker steps wait queued
        fork = source.fork(1, max_rounds=4)
        source.resume(max_rounds=4)
        jobs = [fork.id, source.id]
        poll(lambda: resent(cluster, "thinker", jobs), EVENT_SECONDS, "both first steps queued")
        time.sleep(1.0)  # a second copy, pushed and sent, would be there by now
        for job in jobs:
            found = messages_of(cluster.redis, "thinker", job)
            assert [(lv, body_of(m)[0]) for lv, m in found] == [(level_of(5), [job, 1])], found
            record = cluster.store.machine.record(job)
            assert (record["state"], record["kind"], record["round"]) == ("running", "thinker", "1"), record
        opened = cluster.store.read_events(fork.id)
        kinds = [e.type for e in opened]  # then the source's round-0 calls, carried over
        assert kinds[0] == "job_started" and kinds.count("job_started") == 1, kinds
        assert "model_reply" not in kinds and "final" not in kinds, kinds
        assert opened[0].data.get("forked_from") == source.id, opened[0].data

        cluster.start("thinker", name="thinkers-again")
        completed(cluster, [fork], RESULT_SECONDS)
        assert source.result(timeout=RESULT_SECONDS).status == "completed"
        kinds = [e.type for e in cluster.store.read_events(source.id, count=1000)]
        assert kinds.count("job_started") == 2 and kinds[-1] == "final", kinds
        assert outbox_of(cluster, source.id) == "[]"


# -- 12. another key prefix and intake queue --------------------------------------------------


def test_another_prefix_and_intake_queue(redis_base: str) -> None:
    with cluster_on_db(redis_base, TANDEM_PREFIX="brk31", TANDEM_INTAKE_QUEUE="intake31") as (cluster, _, _):
        cluster.start("thinker", "tools")
        handle = cluster.submit(goal=goal_with_plan("prefixed", ONE_ROUND), max_rounds=4, priority=6)
        spec = {"goal": goal_with_plan("prefixed bare", ONE_ROUND), "max_rounds": 4}
        bare_id = send_bare(cluster, spec, queue="intake31")
        jobs = [handle.id, bare_id]
        seen, broken = watch_commits(cluster, jobs, ("actor",), at_step("actor", jobs), 60)
        assert broken == [] and seen >= 2, broken
        assert [lv for lv, _ in messages_of(cluster.redis, "actor", handle.id)] == [level_of(6)]
        assert cluster.redis.exists(f"brk31:{{{handle.id}}}:state")
        assert list(cluster.redis.scan_iter(match="tandem:*")) == []
        cluster.start("actor")
        completed(cluster, [handle], RESULT_SECONDS)
        assert cluster.app.AsyncResult(bare_id).get(timeout=RESULT_SECONDS)["status"] == "completed"
        assert not any(cluster.redis.exists(k) for k in list_keys("celery"))


# -- 13. signing on, workers SIGKILLed mid-step: every step sent again is accepted ------------


def test_signed_steps_taken_over_after_kills_are_accepted(tmp_path: Path) -> None:
    """A step whose worker was killed while it ran is sent again by the reconciler: with signing,
    its nonce was seen when the killed worker took it, so the message sent again must be sealed
    afresh ("steps are sent again by the reconciler with a fresh seal") or it is refused as a
    replay and the job never ends."""
    with own_cluster({**FAST, **signing_env(tmp_path)}) as ((cluster, thinker, actor), _server):
        thinker.set_script(delayed(plan_model.thinker, 1.0))  # the kills land during model calls
        actor.set_script(delayed(actor_host, 1.0))
        first = cluster.start("thinker", "actor", "tools", concurrency=SMALL)
        handles = plan_jobs(cluster, 6, "signed chaos")
        poll(lambda: len(actor.requests) >= 2, EVENT_SECONDS, "two Actor calls under way")
        cluster.kill(first, "actor")
        cluster.start("actor", name="actor-2", concurrency={"actor": 2})
        poll(lambda: len(thinker.requests) >= 10, EVENT_SECONDS, "the Thinker busy on later rounds")
        cluster.kill(first, "thinker")
        cluster.start("thinker", name="thinker-2", concurrency={"thinker": 2})
        ended(cluster, handles, RESULT_SECONDS)
        checked(cluster, handles)
        for h in handles:
            assert outbox_of(cluster, h.id) == "[]"
            assert each_event_once(cluster, h.id) == []
