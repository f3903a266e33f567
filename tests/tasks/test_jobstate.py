"""``JobMachine``: the job record's atomic transitions, fencing, tool count-down and reconciler verdicts.

Each test runs on fakeredis (with Lua) and on the real Redis at 127.0.0.1:6379 db 8 (skipped when
absent locally, required in CI). Keys get a fresh prefix per test.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tandem.tasks.state.claims import Claim, ClaimRefused, Reconciled
from tandem.tasks.state.machine import JobMachine
from tandem.tasks.state.reconciler import Reconciler

JOB = "job-1"
LEASE = 30.0


def create(machine: JobMachine, kind: str = "thinker", timeout: float = 3600.0) -> None:
    outbox = [{"task": f"tandem.{kind}", "args": [JOB, 0]}]
    assert machine.create(JOB, '{"goal": "g"}', "dual", (0, kind), outbox, timeout=timeout, ttl_after=600)


def claim(machine: JobMachine, round_no: int, kind: str, lease: float = LEASE) -> Claim:
    got = machine.claim(JOB, round_no, kind, lease, 5)
    assert isinstance(got, Claim), got
    return got


def expire_lease(machine: JobMachine, field: str = "lease_until", key: str = "state") -> None:
    """What a dead worker leaves: a lease that ran out (it was renewed by nobody)."""
    machine.redis.hset(machine.store.key(JOB, key), field, "1.0")


def no_key_without_ttl(machine: JobMachine) -> None:
    for key in machine.redis.scan_iter(match=f"{machine.store.prefix}:*"):
        assert machine.redis.ttl(key) > 0, key


# -- create, claim, transition --------------------------------------------------------------------


def test_create_records_the_first_step_and_its_outbox_once(machine: JobMachine) -> None:
    create(machine)
    assert not machine.create(JOB, "{}", "dual", (0, "thinker"), [], timeout=10, ttl_after=600)
    rec = machine.record(JOB)
    assert (rec["state"], rec["round"], rec["kind"], rec["epoch"]) == ("running", "0", "thinker", "0")
    _, outbox = machine.outbox(JOB)
    assert outbox == [{"task": "tandem.thinker", "args": [JOB, 0]}]
    assert float(rec["deadline"]) - float(rec["created_at"]) == pytest.approx(3600, abs=1)
    no_key_without_ttl(machine)


def test_a_step_is_claimed_once_and_every_claim_grows_the_epoch(machine: JobMachine) -> None:
    create(machine)
    first = claim(machine, 0, "thinker")
    assert first.epoch == 1
    assert machine.claim(JOB, 0, "thinker", LEASE, 5) == ClaimRefused("busy")
    expire_lease(machine)
    second = claim(machine, 0, "thinker")
    assert second.epoch == 2
    assert machine.record(JOB)["expiries"] == "1"  # the lease that ran out is counted


@pytest.mark.parametrize(
    ("round_no", "kind"),
    [
        pytest.param(0, "finalize", id="forged-finalize"),
        pytest.param(1, "thinker", id="another-round"),
        pytest.param(0, "actor", id="a-later-step"),
    ],
)
def test_a_message_for_another_step_claims_nothing(machine: JobMachine, round_no: int, kind: str) -> None:
    create(machine)
    assert machine.claim(JOB, round_no, kind, LEASE, 5) == ClaimRefused("other")
    assert machine.record(JOB)["epoch"] == "0"


def test_an_unknown_or_ended_job_claims_nothing(machine: JobMachine) -> None:
    assert machine.claim("nope", 0, "thinker", LEASE, 5) == ClaimRefused("gone")
    create(machine)
    machine.finish(JOB, '{"job_id": "job-1", "status": "cancelled"}', "cancelled", "", 60)
    assert machine.claim(JOB, 0, "thinker", LEASE, 5) == ClaimRefused("ended")


def test_a_transition_stores_the_writes_moves_on_and_writes_the_outbox(machine: JobMachine) -> None:
    create(machine)
    c = claim(machine, 0, "thinker")
    out = [{"task": "tandem.actor_turn", "args": [JOB, 0]}]
    assert machine.transition(c, (0, "actor", 0, ""), out, [("0:thinker", '{"m": 1}')], tx="t1")
    rec = machine.record(JOB)
    assert (rec["kind"], rec["holder"], rec["tx"]) == ("actor", "", "t1")
    assert machine.redis.hget(machine.store.key(JOB, "memory"), "0:thinker") == b'{"m": 1}'
    outbox_id, outbox = machine.outbox(JOB)
    assert outbox == out
    # The same transition again (a retry whose reply was lost) changes nothing and says it happened.
    assert machine.transition(c, (0, "actor", 0, ""), out, [("0:thinker", "other")], tx="t1")
    machine.mark_sent(JOB, outbox_id)
    assert machine.outbox(JOB)[1] == []
    no_key_without_ttl(machine)


def test_a_step_that_lost_its_lease_stores_nothing(machine: JobMachine) -> None:
    """A paused worker (SIGSTOP past its lease) wakes up after another took the step over."""
    create(machine)
    paused = claim(machine, 0, "thinker")
    expire_lease(machine)
    taker = claim(machine, 0, "thinker")
    assert not machine.transition(paused, (0, "actor", 0, ""), [], [("0:thinker", "stale")], tx="a")
    assert machine.redis.hget(machine.store.key(JOB, "memory"), "0:thinker") is None
    assert not machine.renew(paused, LEASE)
    assert machine.transition(taker, (0, "actor", 0, ""), [], [("0:thinker", "fresh")], tx="b")
    assert machine.redis.hget(machine.store.key(JOB, "memory"), "0:thinker") == b"fresh"
    assert not machine.finish(JOB, "{}", "completed", "", 60, claim=paused)


# -- tool calls --------------------------------------------------------------------------------------


def to_tools(machine: JobMachine, calls: int) -> None:
    create(machine, "actor")
    c = claim(machine, 0, "actor")
    outbox = [{"task": "tandem.run_tool", "args": [JOB, 0, i]} for i in range(1, calls + 1)]
    assert machine.transition(c, (0, "tools", calls, ""), outbox, [], tx="x")


def call(machine: JobMachine, index: int) -> Claim:
    got = machine.claim_call(JOB, 0, index, LEASE, 5)
    assert isinstance(got, Claim), got
    return got


def test_the_last_call_to_report_moves_the_job_to_collect(machine: JobMachine) -> None:
    to_tools(machine, 3)
    claims = [call(machine, i) for i in (1, 2, 3)]
    collect = [{"task": "tandem.collect_tools", "args": [JOB, 0]}]
    assert machine.call_done(claims[2], '{"index": 3}', collect) == 1
    assert machine.call_done(claims[0], '{"index": 1}', collect) == 1
    assert machine.record(JOB)["kind"] == "tools"
    assert machine.call_done(claims[1], '{"index": 2}', collect) == 2
    rec = machine.record(JOB)
    assert (rec["kind"], rec["pending"]) == ("collect", "0")
    assert machine.outbox(JOB)[1] == collect
    assert machine.claim_call(JOB, 0, 1, LEASE, 5) == ClaimRefused("other")
    no_key_without_ttl(machine)


@pytest.mark.parametrize("index", [0, 3, 9, -1])
def test_a_call_that_was_never_made_claims_nothing(machine: JobMachine, index: int) -> None:
    to_tools(machine, 2)
    assert machine.claim_call(JOB, 0, index, LEASE, 5) == ClaimRefused("no-call")  # logged as forged
    assert machine.record(JOB)["pending"] == "2"


def test_a_call_runs_once_at_a_time_and_a_reported_call_is_done(machine: JobMachine) -> None:
    to_tools(machine, 2)
    first = call(machine, 1)
    assert first.attempt == 1
    assert machine.claim_call(JOB, 0, 1, LEASE, 5) == ClaimRefused("busy")
    assert machine.call_done(first, '{"index": 1}', []) == 1
    assert machine.claim_call(JOB, 0, 1, LEASE, 5) == ClaimRefused("done")
    assert machine.call_done(first, '{"index": 1}', []) == 0  # a duplicate report counts nothing
    assert machine.record(JOB)["pending"] == "1"


def test_a_reported_call_writes_its_tool_result_event_with_its_result_and_only_then(
    machine: JobMachine,
) -> None:
    to_tools(machine, 2)
    events = machine.store.key(JOB, "events")
    machine.redis.xadd(events, {"type": "job_started", "data": "{}", "at": "0"})  # the intake's stream
    first = call(machine, 1)
    entry = {"type": "tool_result", "data": '{"round": 0, "index": 1}', "at": "1.000"}
    assert machine.call_done(first, '{"index": 1}', [], event=entry) == 1
    assert machine.call_done(first, '{"index": 1}', [], event=entry) == 0  # a duplicate report
    stream = machine.redis.xrange(events)
    assert [fields[b"type"] for _, fields in stream] == [b"job_started", b"tool_result"]  # once
    lost = call(machine, 2)
    expire_lease(machine, "2:until", "calls")
    call(machine, 2)  # taken over: the old holder's report stores nothing and publishes nothing
    assert machine.call_done(lost, '{"index": 2}', [], event={**entry, "data": "{}"}) == 0
    assert len(machine.redis.xrange(events)) == 2


def test_a_commit_appends_its_steps_events_with_what_it_stores_and_only_then(machine: JobMachine) -> None:
    create(machine)
    events = machine.store.key(JOB, "events")
    machine.redis.xadd(events, {"type": "job_started", "data": "{}", "at": "0"})  # the intake's stream
    step = claim(machine, 0, "thinker")
    entries = [
        {"type": "round_started", "data": '{"round": 0}', "at": "1.000"},
        {"type": "model_reply", "data": '{"round": 0, "role": "thinker"}', "at": "1.001"},
    ]
    nxt = (0, "actor", 0, "")
    assert machine.transition(step, nxt, [], [("0:thinker", "{}")], tx="t1", events=entries, maxlen=100)
    # Sent again (a reply lost to a dropped connection): stored once, its events once.
    assert machine.transition(step, nxt, [], [("0:thinker", "{}")], tx="t1", events=entries, maxlen=100)
    stream = machine.redis.xrange(events)
    assert [f[b"type"] for _, f in stream] == [b"job_started", b"round_started", b"model_reply"]
    assert [f[b"at"] for _, f in stream][1:] == [b"1.000", b"1.001"]
    lost = claim(machine, 0, "actor")
    expire_lease(machine)
    claim(machine, 0, "actor")  # taken over: the old holder's commit stores nothing, appends nothing
    assert not machine.transition(lost, (1, "thinker", 0, ""), [], [], tx="t2", events=entries, maxlen=100)
    assert len(machine.redis.xrange(events)) == 3


def test_a_call_lost_before_its_tool_started_is_not_reported_started(machine: JobMachine) -> None:
    to_tools(machine, 1)
    call(machine, 1)  # claimed, then lost (a Redis outage while the call loaded) before the mark
    expire_lease(machine, "1:until", "calls")
    again = call(machine, 1)
    assert (again.attempt, again.started) == (2, False)  # an at_most_once tool runs on this attempt
    assert machine.call_started(again)[0]
    assert machine.redis.hget(machine.store.key(JOB, "calls"), "1:started") == b"1"


def test_a_renewed_lease_keeps_a_call_and_a_step_claimed(machine: JobMachine) -> None:
    to_tools(machine, 1)
    held = call(machine, 1)
    expire_lease(machine, "1:until", "calls")
    assert machine.renew(held, LEASE)  # the heartbeat came in time
    assert machine.claim_call(JOB, 0, 1, LEASE, 5) == ClaimRefused("busy")
    assert reconcile(machine) == Reconciled("wait")
    machine.redis.delete(machine.store.key(JOB, "state"))
    create(machine)
    step = claim(machine, 0, "thinker")
    expire_lease(machine)
    assert machine.renew(step, LEASE)
    assert machine.claim(JOB, 0, "thinker", LEASE, 5) == ClaimRefused("busy")


def test_a_call_taken_over_knows_its_attempt_and_the_old_worker_stores_nothing(machine: JobMachine) -> None:
    to_tools(machine, 1)
    paused = call(machine, 1)
    expire_lease(machine, "1:until", "calls")
    assert machine.call_started(paused)[0]  # its tool ran, or may have
    expire_lease(machine, "1:until", "calls")
    again = call(machine, 1)
    assert (again.attempt, again.started) == (2, True)  # an at_most_once tool is not run again
    assert not machine.call_started(paused)[0]  # the old holder marks nothing
    assert machine.call_done(paused, '{"from": "paused"}', []) == 0
    assert machine.redis.hget(machine.store.key(JOB, "tools"), "0:1") is None
    assert machine.call_done(again, '{"from": "again"}', []) == 2
    assert machine.redis.hget(machine.store.key(JOB, "tools"), "0:1") == b'{"from": "again"}'


# -- waiting, finishing --------------------------------------------------------------------------------


def test_a_rescheduled_step_waits_and_is_claimed_after(machine: JobMachine) -> None:
    create(machine)
    c = claim(machine, 0, "thinker")
    out = [{"task": "tandem.thinker_turn", "args": [JOB, 0], "countdown": 40}]
    until = machine.reschedule(c, 40, "the model host", "TransientModelError: 429", out)
    assert isinstance(until, float)
    status = machine.store.status(JOB)
    assert status is not None and (status.state, status.waiting_for) == ("waiting", "the model host")
    assert status.until == pytest.approx(until) and "429" in (status.error or "")
    assert claim(machine, 0, "thinker").epoch == 2  # a wake-up may come before the countdown
    assert machine.record(JOB)["expiries"] == "0"  # waiting is not a lost worker


def test_a_wait_past_the_deadline_parks_until_the_deadline(machine: JobMachine) -> None:
    create(machine, timeout=10)
    c = claim(machine, 0, "thinker")
    deadline = float(machine.record(JOB)["deadline"])
    until = machine.reschedule(c, 40, "the model host", "429", [])
    assert until == pytest.approx(deadline, abs=0.001)  # not failed before its deadline
    assert machine.record(JOB)["last_error"] == "429"  # what the deadline's end reports


def test_a_wait_once_the_deadline_passed_is_refused(machine: JobMachine) -> None:
    create(machine, timeout=10)
    c = claim(machine, 0, "thinker")
    machine.redis.hset(machine.store.key(JOB, "state"), "deadline", "1.0")
    assert machine.reschedule(c, 40, "the model host", "429", []) == "deadline"


def test_a_renewal_writes_the_calls_last_error_and_keeps_it_otherwise(machine: JobMachine) -> None:
    create(machine)
    c = claim(machine, 0, "thinker")
    assert machine.renew(c, 30, "TransientModelError: HTTP 500")
    assert machine.record(JOB)["last_error"] == "TransientModelError: HTTP 500"
    assert machine.renew(c, 30)
    assert machine.record(JOB)["last_error"] == "TransientModelError: HTTP 500"


def test_finish_keeps_the_first_result_and_expires_every_key(machine: JobMachine) -> None:
    create(machine)
    machine.redis.set(machine.store.key(JOB, "cancel"), "1")
    assert machine.finish(JOB, '{"status": "cancelled"}', "cancelled", "", 120)
    assert not machine.finish(JOB, '{"status": "failed"}', "failed", "late", 120)
    assert machine.redis.get(machine.store.key(JOB, "result")) == b'{"status": "cancelled"}'
    assert machine.record(JOB)["state"] == "cancelled"
    for key in machine.store.keys(JOB):
        if machine.redis.exists(key):
            assert 0 < machine.redis.ttl(key) <= 120, key


# -- the reconciler's verdicts ------------------------------------------------------------------------


def reconcile(machine: JobMachine, stall: float = 60.0, grace: float = 30.0) -> Reconciled:
    return machine.reconcile(JOB, stall, 2, grace)


def age(machine: JobMachine, seconds: float) -> None:
    machine.redis.hset(machine.store.key(JOB, "state"), "progress_at", f"{time.time() - seconds:.6f}")


def test_a_live_or_fresh_job_is_left_alone_and_an_ended_one_is_gone(machine: JobMachine) -> None:
    create(machine)
    assert reconcile(machine) == Reconciled("wait")  # its outbox is fresh
    claim(machine, 0, "thinker")
    age(machine, 1000)
    assert reconcile(machine) == Reconciled("wait")  # a live lease, however long the step runs
    machine.finish(JOB, "{}", "completed", "", 60)
    assert reconcile(machine) == Reconciled("gone")
    assert machine.reconcile("nope", 60, 2, 30) == Reconciled("gone")


def test_a_never_sent_outbox_is_resent_after_the_grace(machine: JobMachine) -> None:
    """The worker died (or the broker refused) between the transition and the send."""
    create(machine)
    age(machine, 31)
    assert reconcile(machine) == Reconciled("resend", "thinker", 0)
    assert reconcile(machine) == Reconciled("wait")  # once per stall period, not in a loop


def test_a_lost_message_is_resent_after_the_stall(machine: JobMachine) -> None:
    create(machine)
    machine.mark_sent(JOB, machine.outbox(JOB)[0])
    age(machine, 59)
    assert reconcile(machine) == Reconciled("wait")  # it may be waiting in a busy queue
    age(machine, 61)
    assert reconcile(machine) == Reconciled("resend", "thinker", 0)
    assert machine.record(JOB)["expiries"] == "0"  # a queue wait is no lease expiry


def test_a_dead_workers_step_is_resent_at_once_and_give_up_counts_expiries(machine: JobMachine) -> None:
    create(machine)
    for expiry in (1, 2):
        claim(machine, 0, "thinker")
        expire_lease(machine)
        assert reconcile(machine) == Reconciled("resend", "thinker", 0)
        assert machine.record(JOB)["expiries"] == str(expiry)
    claim(machine, 0, "thinker")
    expire_lease(machine)
    assert reconcile(machine).action == "give-up"


def test_only_the_lost_calls_of_a_tool_step_are_resent(machine: JobMachine) -> None:
    to_tools(machine, 3)
    machine.mark_sent(JOB, machine.outbox(JOB)[0])
    done = call(machine, 1)
    machine.call_done(done, "{}", [])
    call(machine, 2)
    expire_lease(machine, "2:until", "calls")
    assert reconcile(machine) == Reconciled("resend", "tools", 0, (2,))  # call 3 may still be queued
    age(machine, 61)
    assert reconcile(machine) == Reconciled("resend", "tools", 0, (2, 3))


def test_deadline_and_cancel_verdicts(machine: JobMachine) -> None:
    create(machine)
    machine.redis.set(machine.store.key(JOB, "cancel"), "1")
    assert reconcile(machine) == Reconciled("cancel")
    machine.redis.hset(machine.store.key(JOB, "state"), "deadline", "1.0")
    assert reconcile(machine) == Reconciled("deadline")


def test_a_cancelled_tool_step_ends_only_once_no_call_runs(machine: JobMachine) -> None:
    to_tools(machine, 2)
    running = call(machine, 1)
    machine.redis.set(machine.store.key(JOB, "cancel"), "1")
    assert reconcile(machine).action == "wait"  # call 1 is under way: its result must not be lost
    assert machine.call_done(running, '{"index": 1}', []) == 1
    assert reconcile(machine) == Reconciled("cancel")  # call 2 never started: nothing runs now
    call(machine, 2)
    expire_lease(machine, "2:until", "calls")  # its worker died: nothing runs either
    assert reconcile(machine) == Reconciled("cancel")


def test_the_live_index_is_sharded_and_expires(machine: JobMachine) -> None:
    jobs = [f"job-{i}" for i in range(64)]
    for job in jobs:
        machine.index(job, 1.0, 600)
    shards = {machine.shard_of(job) for job in jobs}
    assert len(shards) > 4
    for shard in shards:
        key = machine.shard_key(shard)
        assert 0 < machine.redis.ttl(key) <= 600
    machine.unindex(jobs[0])
    assert machine.redis.zscore(machine.shard_key(machine.shard_of(jobs[0])), jobs[0]) is None


def redis_now(machine: JobMachine) -> float:
    seconds, micros = machine.redis.time()
    return float(seconds) + micros / 1e6


def test_a_wait_verdict_says_when_the_job_next_needs_a_look(machine: JobMachine) -> None:
    create(machine)
    progress = float(machine.record(JOB)["progress_at"])
    assert reconcile(machine, stall=60.0, grace=30.0).next_look == pytest.approx(progress + 30.0, abs=0.01)
    machine.mark_sent(JOB, machine.outbox(JOB)[0])
    assert reconcile(machine, stall=60.0).next_look == pytest.approx(progress + 60.0, abs=0.01)
    claim(machine, 0, "thinker", lease=5.0)
    lease_until = float(machine.record(JOB)["lease_until"])
    assert reconcile(machine).next_look == pytest.approx(lease_until, abs=0.01)  # when the lease ends
    machine.redis.hset(machine.store.key(JOB, "state"), "deadline", f"{lease_until - 1:.6f}")
    assert reconcile(machine).next_look == pytest.approx(lease_until - 1, abs=0.01)  # the deadline first


def test_a_tool_steps_next_look_is_its_first_call_lease_to_end(machine: JobMachine) -> None:
    to_tools(machine, 2)
    machine.mark_sent(JOB, machine.outbox(JOB)[0])
    call(machine, 1)
    until = float(machine.redis.hget(machine.store.key(JOB, "calls"), "1:until") or 0)
    assert reconcile(machine).next_look == pytest.approx(until, abs=0.01)  # before call 2's stall


def idle_sweeper(machine: JobMachine, lease: float = 240.0, stall: float = 240.0) -> Reconciler:
    """A reconciler that neither resends nor ends anything (its sweeps are looked at, not acted on)."""
    return Reconciler(
        machine,
        lease_seconds=lease,
        stall_seconds=stall,
        max_lease_expiries=5,
        resend=lambda job, verdict: None,
        end=lambda job, verdict: None,
    )


def test_the_reconciler_looks_again_within_one_to_two_intervals(machine: JobMachine) -> None:
    sweeper = idle_sweeper(machine, lease=8.0, stall=60.0)
    assert sweeper.interval == 1.0
    assert sweeper.next_look(Reconciled("wait", next_look=101.5), 100.0) == 101.5
    assert sweeper.next_look(Reconciled("wait", next_look=100.2), 100.0) == 101.0
    assert sweeper.next_look(Reconciled("wait", next_look=160.0), 100.0) == 102.0
    assert sweeper.next_look(Reconciled("resend", "thinker", 0), 100.0) == 102.0


def test_a_sweep_acts_on_a_lease_that_ran_out_a_moment_ago(machine: JobMachine) -> None:
    """Due times are compared on Redis's clock to the microsecond, not to the whole second."""
    resent: list[Reconciled] = []
    sweeper = Reconciler(
        machine,
        lease_seconds=2.0,
        stall_seconds=4.0,
        max_lease_expiries=5,
        resend=lambda job, verdict: resent.append(verdict),
        end=lambda job, verdict: None,
    )
    create(machine)
    claim(machine, 0, "thinker")
    now = redis_now(machine)
    machine.redis.hset(machine.store.key(JOB, "state"), "lease_until", f"{now - 0.001:.6f}")
    machine.index(JOB, now - 0.001, 600)
    assert sweeper.sweep() == 1
    assert resent == [Reconciled("resend", "thinker", 0)]
    score = machine.redis.zscore(machine.shard_key(machine.shard_of(JOB)), JOB)
    assert score is not None and now + 0.25 <= score <= redis_now(machine) + 0.5


@pytest.mark.parametrize(
    "verdict", [Reconciled("wait"), Reconciled("parked", until=1e12), Reconciled("children")]
)
def test_a_job_that_ends_while_the_sweep_looks_at_it_is_not_put_back_in_the_index(
    machine: JobMachine, verdict: Reconciled, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job ended (and unindexed) by another worker between ``reconcile`` and the sweep's move
    of its next look stays out: its shard, emptied, must not come back without a TTL (CI saw
    ``tandem:live:1`` so after a cancelled tree ended)."""
    create(machine)
    machine.index(JOB, redis_now(machine) - 1.0, 600)
    shard = machine.shard_key(machine.shard_of(JOB))
    machine.redis.set(machine.store.key(JOB, "cancel"), "1", ex=600)  # the cancel's own move, too

    def ends_meanwhile(job_id: str, *args: Any, **kwargs: Any) -> Reconciled:
        machine.unindex(job_id)
        return verdict

    monkeypatch.setattr(machine, "reconcile", ends_meanwhile)
    idle_sweeper(machine).sweep()
    assert machine.redis.exists(shard) == 0
    no_key_without_ttl(machine)


def test_an_ended_job_whose_result_was_stored_meanwhile_is_not_put_back_in_the_index(
    machine: JobMachine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``deliver`` failing after another reconciler stored the result and unindexed the job."""
    machine.index(JOB, redis_now(machine) - 1.0, 600)
    shard = machine.shard_key(machine.shard_of(JOB))

    def delivered_elsewhere(job_id: str, mark: str) -> bool:
        machine.unindex(job_id)
        return False

    sweeper = idle_sweeper(machine)
    sweeper.deliver = delivered_elsewhere
    monkeypatch.setattr(machine, "reconcile", lambda job_id, *a, **k: Reconciled("deliver", mark="m"))
    sweeper.sweep()
    assert machine.redis.exists(shard) == 0


def test_a_job_queued_past_the_stall_gets_its_intake_message_again(machine: JobMachine) -> None:
    """``submit`` stores the spec beside the ``queued`` marker; no worker created the record."""
    machine.store.mark_queued(JOB, "dual", intake='{"goal": "g"}')
    assert machine.intake(JOB) == '{"goal": "g"}'
    queued_at = float(machine.record(JOB)["updated_at"])
    assert reconcile(machine, stall=60.0).next_look == pytest.approx(queued_at + 60.0, abs=0.01)
    machine.redis.hset(machine.store.key(JOB, "state"), "updated_at", f"{time.time() - 61:.6f}")
    assert reconcile(machine, stall=60.0) == Reconciled("intake")
    assert reconcile(machine, stall=60.0) == Reconciled("wait")  # once per stall period
    create(machine)  # a worker took it after all: the stored spec goes
    assert machine.intake(JOB) is None
    assert machine.record(JOB)["state"] == "running"
    no_key_without_ttl(machine)


def test_a_queued_marker_without_a_stored_spec_is_dropped_from_the_index(machine: JobMachine) -> None:
    machine.store.mark_queued(JOB, "dual")
    assert reconcile(machine) == Reconciled("gone")


def test_a_refused_intake_leaves_no_stored_spec(machine: JobMachine) -> None:
    machine.store.mark_queued(JOB, "dual", intake='{"goal": "g"}')
    machine.store.discard_queued(JOB)
    assert machine.intake(JOB) is None and machine.record(JOB) == {}


def test_a_cancel_wakes_a_reconciler_waiting_for_its_next_sweep(machine: JobMachine) -> None:
    sweeper = idle_sweeper(machine)
    assert sweeper.interval == 30.0
    create(machine)
    machine.store.request_cancel(JOB)
    assert machine.redis.llen(sweeper.wake_key) == 1 and machine.redis.ttl(sweeper.wake_key) > 0
    stopped: list[bool] = []
    waiting = threading.Thread(target=lambda: stopped.append(sweeper.pause()), daemon=True)
    waiting.start()
    waiting.join(20)  # the push is there: the wait ends at its first look, not after its 30 s
    assert stopped == [False]  # woken, not stopped
    assert not machine.redis.exists(sweeper.wake_key)  # one sweep answers every push so far
    sweeper.stop()
    assert sweeper.pause() is True


def test_a_cancel_that_comes_while_a_sweep_looks_at_the_job_keeps_its_look_now(machine: JobMachine) -> None:
    """The sweep read the job (its lease runs: ``wait``), then a cancel moved its next look to now:
    the sweep's own next look does not move it back past the cancel's wake."""
    sweeper = idle_sweeper(machine)
    create(machine)
    claim(machine, 0, "thinker")
    now = redis_now(machine)
    machine.index(JOB, now - 0.001, 600)
    reconcile_first = machine.reconcile

    def then_cancel(*args: Any, **kwargs: Any) -> Reconciled:
        verdict = reconcile_first(*args, **kwargs)
        machine.store.request_cancel(JOB)
        return verdict

    machine.__dict__["reconcile"] = then_cancel
    sweeper.sweep()
    score = machine.redis.zscore(machine.shard_key(machine.shard_of(JOB)), JOB)
    assert score is not None and score <= redis_now(machine)  # due at the sweep the push wakes
    assert machine.redis.llen(sweeper.wake_key) == 1
