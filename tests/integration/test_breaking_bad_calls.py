"""Breaking "Every call gets an answer" (docs/distributed.md, Enqueueing from another service): every
public task name called from a Celery client that never imports tandem with a call that does not
fit (no kwargs, positional args, unknown and extra kwargs, wrong types, null, huge and deeply nested
values, a spec that is not an object, a task id no job may have or one of an existing job, the same
bad message twice, a message with bad headers) gets an answer naming what came and the documented
shape, leaves no key behind, and never harms a job that exists: neither an ended one nor one
running while the bad calls come (its Celery result, record, memory and events).

All calls go out in one batch while two jobs are held mid-step by their model host (one gets
copies of ``tandem.infer`` under its id, the other copies of control tasks); each test then asserts
on one call's answer. ``test_a_message_celery_cannot_read_still_gets_an_answer`` holds messages
docs/durability.md says are dead-lettered (``tandem:dead-letters``) although their headers name the
task and the id a client waits on: the two pages disagree, and the client waits forever.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration import bare_client, plan_model
from tests.integration.breaking import logs, poll
from tests.integration.conftest import Cluster
from tests.integration.event_order import order_problems, raw_events
from tests.openai_server import OpenAIServer, RecordedRequest, Reply

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]
INFER_SHAPE = 'kwargs={"spec": {"goal": "...", ...}}'
NO_JOB = "no-such-job-0001"
HUGE = "x" * 3_000_000
ADD = [[{"name": "add", "args": {"a": 1, "b": 2}}]]
VALID = {
    "tandem.resume": {"job_id": NO_JOB},
    "tandem.fork": {"job_id": NO_JOB, "round": 1},
    "tandem.decide": {"job_id": NO_JOB, "decisions": [{"index": 1, "approve": True}]},
    "tandem.answer": {"job_id": NO_JOB, "pause_id": f"{NO_JOB}:0:tools:1", "answer": "Oslo"},
    "tandem.message": {"job_id": NO_JOB, "text": "hello", "idempotency_key": "k-1"},
    "tandem.follow_up": {"job_id": NO_JOB, "goal": "next"},
}
"""Each control task's call that fits (for a job that does not exist)."""
WRONG_TYPES = {
    "tandem.resume": [("max_rounds", "30"), ("max_rounds", True)],
    "tandem.fork": [("round", 1.5), ("round", "2"), ("round", -1)],
    "tandem.decide": [("decisions", 42), ("decisions", "yes")],
    "tandem.answer": [("pause_id", 7)],
    "tandem.message": [("text", 123), ("idempotency_key", ["k"])],
    "tandem.follow_up": [("goal", ["next"]), ("goal", None)],
}


def deep(depth: int) -> str:
    """A JSON array nested ``depth`` levels (as text: Python's json cannot write it that deep)."""
    return "[" * depth + "]" * depth


EMBED = json.dumps({"callbacks": None, "errbacks": None, "chain": None, "chord": None})


def raw_body(args: Any, kwargs_json: str) -> str:
    """A protocol-2 body ``[args, kwargs, embed]`` with ``kwargs`` written as given."""
    return f"[{json.dumps(args)}, {kwargs_json}, {EMBED}]"


def infer_cases() -> dict[str, tuple[dict[str, Any], list[str]]]:
    """tandem.infer calls that do not fit -> the fragments their TaskCallError must hold."""
    spec = {"goal": "fits"}
    return {
        "no-kwargs": ({}, ["missing 'spec'"]),
        "positional": ({"args": [1, 2, 3]}, ["keyword arguments only", "args=[1, 2, 3]"]),
        "positional-spec": ({"args": [spec]}, ["keyword arguments only"]),
        "unknown-kwarg": ({"kwargs": {"specs": spec}}, ["'specs'"]),
        "extra-kwarg": ({"kwargs": {"spec": spec, "priority": 5}}, ["'priority'"]),
        "deep-unknown-kwarg": ({"kwargs": {"spec": spec, "zz": json.loads(deep(500))}}, ["'zz'"]),
        "kwargs-null": ({"raw": raw_body([], "null")}, []),
        "args-null": ({"raw": raw_body(None, json.dumps({"spec": spec}))}, []),
        "bad-retries-header": ({"args": [1], "headers": {"retries": "many"}}, []),
        "bad-repr-headers": ({"args": [1], "headers": {"kwargsrepr": 12345, "argsrepr": ["x"]}}, []),
    }


def unreadable_cases() -> dict[str, tuple[str, dict[str, Any]]]:
    """Messages Celery itself cannot read (docs/durability.md dead-letters them), though their
    headers name the task and its id: a body that is an object, not JSON, or nested deeper than a
    Python decoder goes; an ``eta``, ``expires`` or ``timelimit`` header that is not one."""
    cases: dict[str, tuple[str, dict[str, Any]]] = {}
    for task, fits in {"tandem.infer": {"spec": {"goal": "fits"}}, **VALID}.items():
        short = task.split(".")[1]
        cases[f"{short}-body-an-object"] = (task, {"raw": json.dumps(fits)})
        cases[f"{short}-body-not-json"] = (task, {"raw": "spec=goal"})
        cases[f"{short}-nested-100000-deep"] = (
            task,
            {"raw": raw_body([], json.dumps(fits)[:-1] + ', "zz": ' + deep(100_000) + "}")},
        )
    for header, value in (("eta", "tomorrow"), ("expires", "never"), ("timelimit", "soon")):
        cases[f"infer-bad-{header}-header"] = ("tandem.infer", {"args": [1], "headers": {header: value}})
    return cases


def spec_cases() -> dict[str, tuple[Any, list[str]]]:
    """Specs that are not a valid JSON object -> fragments of the failed JobResult's error."""
    return {
        "spec-a-string": ("What is 2 + 2?", [INFER_SHAPE]),
        "spec-a-list": ([{"goal": "x"}], [INFER_SHAPE]),
        "spec-null": (None, [INFER_SHAPE]),
        "spec-a-number": (42, [INFER_SHAPE]),
        "spec-empty": ({}, ["goal"]),
        "goal-a-number": ({"goal": 5}, ["goal"]),
        "max-rounds-a-word": ({"goal": "x", "max_rounds": "many"}, ["max_rounds"]),
        "max-rounds-zero": ({"goal": "x", "max_rounds": 0}, ["max_rounds"]),
        "unknown-field": ({"goal": "x", "bogus": 1}, ["bogus"]),
        "huge-goal": ({"goal": HUGE}, ["TANDEM_MAX_"]),
        "deep-metadata": (
            {"goal": "x", "metadata": {"d": json.loads(deep(50))}},
            ["TANDEM_MAX_METADATA_DEPTH"],
        ),
    }


BAD_IDS = {
    "id-with-space": "has space",
    "id-with-braces": "{braces}",
    "id-too-long": "j" * 300,
    "id-bell": "\abell",
}


def control_cases() -> dict[str, tuple[str, dict[str, Any], list[str]]]:
    """Control task calls that do not fit -> (task, call, fragments of the refusal's error)."""
    cases: dict[str, tuple[str, dict[str, Any], list[str]]] = {}
    for task, fits in VALID.items():
        short = task.split(".")[1]
        cases[f"{short}-no-kwargs"] = (task, {}, ["'job_id'"])
        cases[f"{short}-positional"] = (task, {"args": ["zz-positional-value"]}, ["zz-positional-value"])
        cases[f"{short}-unknown-kwarg"] = (task, {"kwargs": {**fits, "bogus": 1}}, ["'bogus'"])
        cases[f"{short}-deep-unknown-kwarg"] = (
            task,
            {"kwargs": {**fits, "zz": json.loads(deep(500))}},
            ["'zz'"],
        )
        cases[f"{short}-job-id-a-number"] = (task, {"kwargs": {**fits, "job_id": 123}}, ["'job_id'"])
        cases[f"{short}-job-id-null"] = (task, {"kwargs": {**fits, "job_id": None}}, ["'job_id'"])
        cases[f"{short}-job-id-braces"] = (task, {"kwargs": {**fits, "job_id": "a b{c}"}}, ["'job_id'"])
        cases[f"{short}-owner-a-number"] = (task, {"kwargs": {**fits, "owner": 5}}, ["'owner'"])
        cases[f"{short}-kwargs-null"] = (task, {"raw": raw_body([], "null")}, [])
        for n, (arg, value) in enumerate(WRONG_TYPES[task]):
            cases[f"{short}-{arg}-wrong-type-{n}"] = (task, {"kwargs": {**fits, arg: value}}, [f"'{arg}'"])
    return cases


def snapshot(cluster: Cluster, job_id: str) -> dict[str, Any]:
    """Every key of a job (its serialized value) and its Celery result."""
    keys = sorted(cluster.redis.scan_iter(match=f"{cluster.settings.prefix}:{{{job_id}}}:*"))
    found = {k.decode(): cluster.redis.dump(k) for k in keys}
    found["celery-task-meta"] = cluster.redis.get(f"celery-task-meta-{job_id}")
    return found


def finished(cluster: Cluster, task_id: str) -> int:
    """How many runs of a task with this id the workers logged as done (Celery's own lines)."""
    return sum(1 for line in logs(cluster, f"[{task_id}]") if " received" not in line)


def copies(ended: str, infer_job: str, control_job: str) -> list[tuple[str, str, dict[str, Any]]]:
    """Messages sent under the id of a job that exists: (name, that id, call)."""
    spec = {"spec": {"goal": "another"}}
    return [
        ("ended-args", ended, {"task": "tandem.infer", "args": [1]}),
        ("ended-valid-copy", ended, {"task": "tandem.infer", "kwargs": spec}),
        ("ended-spec-string", ended, {"task": "tandem.infer", "kwargs": {"spec": "x"}}),
        ("ended-fork-no-kwargs", ended, {"task": "tandem.fork", "kwargs": {}}),
        (
            "ended-message-wrong-type",
            ended,
            {"task": "tandem.message", "kwargs": {"job_id": ended, "text": 5}},
        ),
        ("running-no-kwargs", infer_job, {"task": "tandem.infer", "kwargs": {}}),
        ("running-args", infer_job, {"task": "tandem.infer", "args": [1]}),
        ("running-valid-copy", infer_job, {"task": "tandem.infer", "kwargs": spec}),
        ("running-spec-list", infer_job, {"task": "tandem.infer", "kwargs": {"spec": [1]}}),
        ("running-resume-no-kwargs", control_job, {"task": "tandem.resume", "kwargs": {}}),
        ("running-answer-positional", control_job, {"task": "tandem.answer", "args": [control_job]}),
        (
            "running-fork-bad-round",
            control_job,
            {"task": "tandem.fork", "kwargs": {"job_id": "x", "round": 1.5}},
        ),
    ]


def more_calls(ended: str, control_job: str) -> list[dict[str, Any]]:
    """The same bad message twice, one sent with ``ignore_result``, goals over the limit, and a
    message into a running job with a wrong-typed key."""
    return [
        {"name": "twice-1", "task": "tandem.infer", "args": [7], "task_id": "twice-infer-0001"},
        {"name": "twice-2", "task": "tandem.infer", "args": [7], "task_id": "twice-infer-0001"},
        {"name": "fork-twice-1", "task": "tandem.fork", "kwargs": {"round": 1}, "task_id": "twice-fork-0001"},
        {"name": "fork-twice-2", "task": "tandem.fork", "kwargs": {"round": 1}, "task_id": "twice-fork-0001"},
        {"name": "ignored", "task": "tandem.infer", "args": [1], "ignore_result": True, "wait": False},
        {"name": "follow-up-huge", "task": "tandem.follow_up", "kwargs": {"job_id": ended, "goal": HUGE}},
        {"name": "fork-huge", "task": "tandem.fork", "kwargs": {"job_id": ended, "round": 1, "goal": HUGE}},
        {
            "name": "message-to-running-key-a-list",
            "task": "tandem.message",
            "kwargs": {"job_id": control_job, "text": "injected", "idempotency_key": ["k"]},
        },
    ]


@pytest.fixture(scope="module")
def batch(dual_cluster: Hosts) -> Iterator[dict[str, Any]]:
    """Every call sent at once from a bare client while two jobs are held mid-step (one gets
    copies of ``tandem.infer`` under its id, the other of control tasks), then both released."""
    cluster, thinker, _ = dual_cluster
    ended = cluster.submit(goal=plan_model.goal_with_plan("[[ended]] job", ADD), max_rounds=4)
    assert ended.result(timeout=120).status == "completed"
    release = threading.Event()

    def held(request: RecordedRequest) -> Reply:
        if "[[running-" in json.dumps(request["messages"]):
            release.wait(600)
        return plan_model.thinker(request)

    thinker.set_script(held)
    running = {
        kind: cluster.submit(goal=plan_model.goal_with_plan(f"[[running-{kind}]] job", ADD), max_rounds=4)
        for kind in ("infer", "control")
    }

    def both_held() -> bool:
        asked = json.dumps([r["messages"] for r in thinker.requests])
        return all(f"[[running-{kind}]]" in asked for kind in running)

    poll(both_held, 120, "both running jobs held by their model host")
    e, ri, rc = ended.id, running["infer"].id, running["control"].id
    before = snapshot(cluster, e)
    done_before = {job: finished(cluster, job) for job in (e, ri, rc)}
    sent = copies(e, ri, rc)
    calls = [{"name": name, "task_id": job, "wait": False, **call} for name, job, call in sent]
    calls += [{"name": n, "task": "tandem.infer", **call} for n, (call, _) in infer_cases().items()]
    calls += [{"name": n, "task": task, **call} for n, (task, call) in unreadable_cases().items()]
    calls += [
        {"name": n, "task": "tandem.infer", "kwargs": {"spec": spec}} for n, (spec, _) in spec_cases().items()
    ]
    calls += [
        {"name": n, "task": "tandem.infer", "kwargs": {"spec": {"goal": "x"}}, "task_id": task_id}
        for n, task_id in BAD_IDS.items()
    ]
    calls += [{"name": n, "task": task, **call} for n, (task, call, _) in control_cases().items()]
    calls += more_calls(e, rc)
    out = bare_client.send(cluster.url, calls, wait_for=90)
    counts = {job: sum(1 for _, j, _ in sent if j == job) for job in (e, ri, rc)}
    poll(
        lambda: all(finished(cluster, job) >= done_before[job] + n for job, n in counts.items()),
        90,
        "the copies under the ids of existing jobs to be run",
    )
    while_running = {job: cluster.redis.get(f"celery-task-meta-{job}") for job in (ri, rc)}
    release.set()
    results = {job: running[kind].result(timeout=120) for kind, job in (("infer", ri), ("control", rc))}
    yield {
        "out": out["outcomes"],
        "imported": out["imported"],
        "cluster": cluster,
        "ended": (e, before, snapshot(cluster, e)),
        "running": {
            kind: (job, while_running[job], results[job], raw_events(cluster.redis, job))
            for kind, job in (("infer", ri), ("control", rc))
        },
    }
    thinker.set_script(plan_model.thinker)


def answer(batch: dict[str, Any], name: str) -> dict[str, Any]:
    found = dict(batch["out"][name])
    assert found["state"] != "PENDING", f"{name}: no answer was ever stored for task id {found['id']!r}"
    return found


@pytest.mark.parametrize("name", sorted(infer_cases()))
def test_infer_answers_a_call_that_does_not_fit_with_a_task_call_error(
    batch: dict[str, Any], name: str
) -> None:
    found = answer(batch, name)
    assert (found["state"], found.get("error_type")) == ("FAILURE", "TaskCallError"), found
    for fragment in ["tandem.infer", INFER_SHAPE, *infer_cases()[name][1]]:
        assert fragment in found["error"], (fragment, found)
    assert len(found["error"]) < 5000, len(found["error"])


@pytest.mark.parametrize("name", sorted(unreadable_cases()))
def test_a_message_celery_cannot_read_still_gets_an_answer(batch: dict[str, Any], name: str) -> None:
    task = unreadable_cases()[name][0]
    found = answer(batch, name)
    said = found.get("error") or (found.get("result") or {}).get("error") or ""
    assert task in said and "kwargs=" in said, found


@pytest.mark.parametrize("name", sorted(spec_cases()))
def test_a_spec_that_is_not_a_valid_object_is_the_jobs_refusal(batch: dict[str, Any], name: str) -> None:
    found = answer(batch, name)
    assert found["state"] == "SUCCESS", found
    result = found["result"]
    assert (result["status"], result["job_id"]) == ("failed", found["id"]), result
    for fragment in spec_cases()[name][1]:
        assert fragment in result["error"], (fragment, result["error"][:2000])
    assert len(result["error"]) < 5000, len(result["error"])
    cluster = batch["cluster"]
    assert list(cluster.redis.scan_iter(match=f"{cluster.settings.prefix}:{{{found['id']}}}:*")) == []


@pytest.mark.parametrize("name", sorted(BAD_IDS))
def test_infer_under_a_task_id_no_job_may_have_is_refused(batch: dict[str, Any], name: str) -> None:
    found = answer(batch, name)
    said = found.get("error") or (found.get("result") or {}).get("error") or ""
    refused = found["state"] == "FAILURE" or (found.get("result") or {}).get("status") == "failed"
    assert refused and "id" in said, found


@pytest.mark.parametrize("name", sorted(control_cases()))
def test_a_control_task_answers_a_call_that_does_not_fit(batch: dict[str, Any], name: str) -> None:
    task, _, fragments = control_cases()[name]
    found = answer(batch, name)
    assert found["state"] == "SUCCESS", found
    result = found["result"]
    assert "job_id" in result and (result["accepted"], result.get("reason")) == (False, "invalid"), result
    for fragment in [task, 'kwargs={"job_id": "<job id>"', *fragments]:
        assert fragment in result["error"], (fragment, result)
    assert len(result["error"]) < 5000, len(result["error"])


def test_the_same_bad_message_twice_gets_the_same_answer(batch: dict[str, Any]) -> None:
    assert answer(batch, "twice-1") == answer(batch, "twice-2")
    assert answer(batch, "twice-1")["error_type"] == "TaskCallError"
    assert answer(batch, "fork-twice-1") == answer(batch, "fork-twice-2")
    assert answer(batch, "fork-twice-1")["result"]["reason"] == "invalid"


def test_a_bad_call_sent_with_ignore_result_stores_no_answer(batch: dict[str, Any]) -> None:
    assert batch["out"]["ignored"]["state"] == "PENDING"


def test_goals_over_the_limit_in_a_follow_up_or_a_fork_are_refused_naming_the_limit(
    batch: dict[str, Any],
) -> None:
    for name in ("follow-up-huge", "fork-huge"):
        result = answer(batch, name)["result"]
        assert result["accepted"] is False and "TANDEM_MAX_" in result["error"], result
        assert len(result["error"]) < 5000


def test_a_message_with_a_wrong_typed_key_is_refused_and_never_reaches_the_job(batch: dict[str, Any]) -> None:
    result = answer(batch, "message-to-running-key-a-list")["result"]
    _, _, _, events = batch["running"]["control"]
    assert [e for e in events if e["type"] == "message_received"] == []
    assert (result["accepted"], result.get("reason")) == (False, "invalid"), result
    assert "'idempotency_key'" in result["error"], result


def test_bad_calls_under_an_ended_jobs_id_change_nothing_of_it(batch: dict[str, Any]) -> None:
    _, before, after = batch["ended"]
    assert after == before, {k for k in set(before) | set(after) if before.get(k) != after.get(k)}


@pytest.mark.parametrize("kind", ["infer", "control"])
def test_bad_calls_under_a_running_jobs_id_never_stand_for_its_result(
    batch: dict[str, Any], kind: str
) -> None:
    job, while_running, result, events = batch["running"][kind]
    assert while_running is None, (
        f"a bad {kind} call wrote the running job's Celery result: {while_running!r}"
    )
    assert (result.status, result.deliverable) == ("completed", "all planned calls ran"), result
    meta = json.loads(batch["cluster"].redis.get(f"celery-task-meta-{job}"))
    assert (meta["status"], meta["result"]) == ("SUCCESS", result.model_dump(mode="json"))
    assert [e["type"] for e in events].count("job_started") == 1
    assert order_problems(events, streaming=False) == []
    assert events[0]["spec"]["goal"].startswith(f"[[running-{kind}]]")


def test_the_client_never_imported_tandem_and_no_worker_exited(batch: dict[str, Any]) -> None:
    assert batch["imported"] == []
    assert batch["cluster"].exited() == []
