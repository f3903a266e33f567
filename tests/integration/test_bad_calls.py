"""Every call of a public task name gets an answer (docs/distributed.md, "Enqueueing from another
service"): a bare Celery client that never imports tandem sends ``tandem.infer`` and every control
task with no arguments, positional ones, unknown ones and ones of a wrong type, to real workers,
and waits for each result. ``tandem.infer`` fails with ``TaskCallError`` (the client's ``get()``
raises it); a control task answers ``accepted: false``. Each names what was wrong and the call's
documented shape, and nothing else happens."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from typing import Any

import pytest

from tests.integration.conftest import Cluster
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]

CLIENT = """
import json, sys
from celery import Celery

app = Celery(broker=sys.argv[1], backend=sys.argv[1])
cases = json.loads(sys.argv[2])
sent = [
    app.send_task(c["task"], args=c["args"], kwargs=c["kwargs"], task_id=c.get("task_id")) for c in cases
]
for case, result in zip(cases, sent):
    out = {"id": case["id"], "task_id": result.id}
    try:
        out["result"] = result.get(timeout=60)
    except Exception as exc:  # what a client sees of a failed task: the stored exception, raised
        is_type_error = isinstance(exc, TypeError)
        out["raised"] = {"type": type(exc).__name__, "message": str(exc), "type_error": is_type_error}
    print(json.dumps(out), flush=True)
tandem = {"tandem", "reasoner", "toolkit", "tasks", "workers", "broker_config"}
print(json.dumps({"imported": sorted({m.split(".")[0] for m in sys.modules} & tandem)}))
"""

INFER = 'kwargs={"spec": {"goal": "...", ...}}'
GONE = "0b7c1d9e-0000-4000-8000-000000000000"  # a job id nobody used
SPEC = {"goal": "g", "max_rounds": 2}

INFER_CASES: list[tuple[str, list[Any], dict[str, Any], str]] = [
    ("nothing", [], {}, f"tandem.infer takes {INFER}: got kwargs={{}} (missing 'spec')"),
    (
        "positional-spec",
        [SPEC],
        {},
        f"tandem.infer takes keyword arguments only, {INFER}: got args=[{{'goal': 'g', 'max_rounds': 2}}]",
    ),
    ("positional", [1, 2, 3], {}, f"tandem.infer takes keyword arguments only, {INFER}: got args=[1, 2, 3]"),
    (
        "unknown",
        [],
        {"spec": SPEC, "priority": 3},
        f"tandem.infer takes {INFER}: got kwargs={{'spec': {{'goal': 'g', 'max_rounds': 2}}, 'priority': 3}} "
        "(unknown 'priority')",
    ),
    (
        "spec-fields-as-kwargs",
        [],
        {"goal": "g"},
        f"tandem.infer takes {INFER}: got kwargs={{'goal': 'g'}} (unknown 'goal'; missing 'spec')",
    ),
]
"""(case, args, kwargs, the error's exact message)"""

CONTROL_CASES: list[tuple[str, str, list[Any], dict[str, Any], str]] = [
    ("resume-nothing", "tandem.resume", [], {}, "(missing 'job_id')"),
    ("resume-positional", "tandem.resume", [GONE], {}, f"got args=['{GONE}']"),
    ("resume-unknown", "tandem.resume", [], {"job_id": GONE, "rounds": 3}, "(unknown 'rounds')"),
    ("resume-type", "tandem.resume", [], {"job_id": GONE, "max_rounds": "3"}, "argument 'max_rounds' = '3'"),
    ("fork-nothing", "tandem.fork", [], {}, "(missing 'job_id', 'round')"),
    ("fork-positional", "tandem.fork", [GONE, 1], {}, f"got args=['{GONE}', 1]"),
    ("fork-type", "tandem.fork", [], {"job_id": GONE, "round": 1.5}, "argument 'round' = 1.5"),
    ("decide-nothing", "tandem.decide", [], {}, "(missing 'job_id', 'decisions')"),
    ("decide-positional", "tandem.decide", [GONE, []], {}, "keyword arguments only"),
    ("decide-type", "tandem.decide", [], {"job_id": 7, "decisions": []}, "argument 'job_id' = 7"),
    ("answer-nothing", "tandem.answer", [], {}, "(missing 'job_id')"),
    ("answer-unknown", "tandem.answer", [], {"job_id": GONE, "reply": "yes"}, "(unknown 'reply')"),
    ("message-positional", "tandem.message", [GONE, "hi"], {}, "keyword arguments only"),
    ("message-type", "tandem.message", [], {"job_id": GONE, "text": ["hi"]}, "argument 'text' = ['hi']"),
    ("follow-up-nothing", "tandem.follow_up", [], {}, "(missing 'job_id', 'goal')"),
    ("follow-up-type", "tandem.follow_up", [], {"job_id": GONE, "goal": 42}, "argument 'goal' = 42"),
]
"""(case, task, args, kwargs, a part of the error that names what was wrong)"""

OPTIONAL = '(optional: "idempotency_key", "owner")'
SHAPES = {
    "tandem.resume": 'kwargs={"job_id": "<job id>"} (optional: "max_rounds", "owner")',
    "tandem.fork": 'kwargs={"job_id": "<job id>", "round": <int>} (optional: "goal", "max_rounds", "owner")',
    "tandem.decide": 'kwargs={"job_id": "<job id>", "decisions": [',
    "tandem.answer": 'kwargs={"job_id": "<job id>"} (optional: "answer", "pause_id", "idempotency_key", '
    '"owner")',
    "tandem.message": f'kwargs={{"job_id": "<job id>", "text": "<text>"}} {OPTIONAL}',
    "tandem.follow_up": f'kwargs={{"job_id": "<job id>", "goal": "<text>"}} {OPTIONAL}',
}
"""The documented shape each control task's refusal names."""


def _bare_client(cluster: Cluster, cases: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = subprocess.run(
        [sys.executable, "-c", CLIENT, cluster.url, json.dumps(cases)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",
        check=True,
    )
    lines = [json.loads(line) for line in out.stdout.strip().splitlines()]
    assert lines[-1] == {"imported": []}, lines[-1]  # the client never imported tandem
    return {line["id"]: line for line in lines[:-1]}


def test_every_bad_call_of_every_public_task_gets_an_answer(dual_cluster: Hosts) -> None:
    cluster, _, _ = dual_cluster
    again = str(uuid.uuid4())
    cases = [{"id": case, "task": "tandem.infer", "args": a, "kwargs": k} for case, a, k, _ in INFER_CASES]
    cases += [
        # The same bad message twice under one id (a client that sends again): the same answer.
        {"id": "twice-1", "task": "tandem.infer", "args": [1], "kwargs": {}, "task_id": again},
        {"id": "twice-2", "task": "tandem.infer", "args": [1], "kwargs": {}, "task_id": again},
        # A task id no job may have: refused as such, whatever the spec.
        {"id": "bad-id", "task": "tandem.infer", "args": [], "kwargs": {"spec": SPEC}, "task_id": "a b"},
        # A spec that is not an object: the spec is refused like any refused spec (a JobResult).
        {"id": "spec-text", "task": "tandem.infer", "args": [], "kwargs": {"spec": "What is 2 + 2?"}},
    ]
    cases += [{"id": case, "task": task, "args": a, "kwargs": k} for case, task, a, k, _ in CONTROL_CASES]
    answers = _bare_client(cluster, cases)

    for case, _, _, message in INFER_CASES:
        raised = answers[case].get("raised")
        assert raised == {"type": "TaskCallError", "message": message, "type_error": False}, (
            case,
            answers[case],
        )
        task_id = answers[case]["task_id"]
        meta = json.loads(cluster.redis.get(f"celery-task-meta-{task_id}") or b"{}")
        assert meta["status"] == "FAILURE", (case, meta)
        assert meta["result"]["exc_type"] == "TaskCallError"
        assert meta["result"]["exc_module"] == "tandem.tasks.errors"
        assert meta["result"]["exc_message"] == [message]
        assert list(cluster.redis.scan_iter(match=f"{cluster.settings.prefix}:{{{task_id}}}:*")) == []

    first, second = answers["twice-1"], answers["twice-2"]
    assert first["task_id"] == second["task_id"] == again
    assert first["raised"] == second["raised"]
    assert first["raised"]["message"].startswith(f"tandem.infer takes keyword arguments only, {INFER}")

    bad_id = answers["bad-id"]["raised"]
    assert bad_id["type"] == "TaskCallError"
    assert bad_id["message"].startswith("tandem.infer: argument 'task id' = 'a b': must be a job id")
    assert "leave task_id out" in bad_id["message"]

    refused = answers["spec-text"]["result"]
    assert refused["status"] == "failed"
    assert refused["error"] == f"tandem.infer takes {INFER}: a job spec must be a JSON object, got str"

    for case, task, _, _, part in CONTROL_CASES:
        answer = answers[case].get("result")
        assert isinstance(answer, dict), (case, answers[case])
        assert answer["accepted"] is False and answer["reason"] == "invalid", (case, answer)
        assert part in answer["error"], (case, answer["error"])
        assert SHAPES[task] in answer["error"], (case, answer["error"])
        assert answer["error"].startswith(task), (case, answer["error"])
    assert list(cluster.redis.scan_iter(match=f"{cluster.settings.prefix}:{{{GONE}}}:*")) == []
    assert cluster.exited() == []

    # The workers that answered all that go on running jobs.
    from tests.integration.plan_model import goal_with_plan

    handle = cluster.submit(
        goal=goal_with_plan("after bad calls", [[{"name": "add", "args": {"a": 1, "b": 2}}]])
    )
    assert handle.result(timeout=90).status == "completed"
