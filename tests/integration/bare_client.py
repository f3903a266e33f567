"""A Celery client that never imports tandem, run as a child process: it sends a batch of calls by
task name (``send_task``, or a message published by hand when a call brings a raw body or its own
headers) and reads back what the result backend holds for each.

A call is a JSON object: ``name`` (the test's), ``task``, ``args``, ``kwargs``, optional
``task_id``, ``ignore_result``, ``raw`` (the message body sent as it is, ``application/json``),
``headers`` (merged over Celery's protocol-2 headers), and ``wait`` (``false``: do not wait for
an answer, e.g. a call under an id whose result exists already).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

SCRIPT = r"""
import json, sys, time, uuid
from celery import Celery

url, wait_for = sys.argv[1], float(sys.argv[2])
calls = json.load(sys.stdin)
app = Celery(broker=url, backend=url)
sent = []
for call in calls:
    tid = call.get("task_id") or str(uuid.uuid4())
    if call.get("raw") is not None or call.get("headers"):
        msg = app.amqp.as_task_v2(tid, call["task"], call.get("args") or (), call.get("kwargs") or {})
        headers = {**msg.headers, **(call.get("headers") or {})}
        body = call["raw"] if call.get("raw") is not None else json.dumps(msg.body)
        with app.producer_or_acquire() as producer:
            producer.publish(
                body.encode(), exchange="", routing_key="celery", headers=headers,
                content_type="application/json", content_encoding="utf-8",
                correlation_id=tid, delivery_mode=2, retry=True,
            )
    else:
        app.send_task(
            call["task"], args=call.get("args"), kwargs=call.get("kwargs"), task_id=tid,
            ignore_result=call.get("ignore_result", False),
        )
    sent.append((call, tid))

def outcome(tid):
    result = app.AsyncResult(tid)
    state = result.state
    out = {"id": tid, "state": state}
    if state == "SUCCESS":
        out["result"] = result.result
    elif state in ("FAILURE", "REVOKED"):
        out["error_type"] = type(result.result).__name__
        out["error"] = str(result.result)
    return out

deadline = time.monotonic() + wait_for
waiting = {c["name"]: tid for c, tid in sent if c.get("wait", True)}
while waiting and time.monotonic() < deadline:
    for name, tid in list(waiting.items()):
        if app.AsyncResult(tid).state in ("SUCCESS", "FAILURE", "REVOKED"):
            del waiting[name]
    time.sleep(0.2)
ours = {"tandem", "reasoner", "toolkit", "tasks", "workers", "broker_config"}
print(json.dumps({
    "outcomes": {c["name"]: outcome(tid) for c, tid in sent},
    "imported": sorted({m.split(".")[0] for m in sys.modules} & ours),
}))
"""


def send(url: str, calls: list[dict[str, Any]], wait_for: float) -> dict[str, Any]:
    """Run the bare client on ``calls``: ``{"outcomes": {name: {"id", "state", "result" |
    "error_type" and "error"}}, "imported": [tandem's modules it imported]}``."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, url, str(wait_for)],
        input=json.dumps(calls),
        capture_output=True,
        text=True,
        timeout=wait_for + 120,
        cwd="/",
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))
