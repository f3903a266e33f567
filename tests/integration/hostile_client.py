"""A hostile client, run as its own process: it never imports tandem and talks to the broker (bare
Celery, raw kombu messages) and to Flower's HTTP API.

    python -m tests.integration.hostile_client BROKER_URL CASES.json [FLOWER_URL USER:PASSWORD]

``CASES.json`` is a list of ``{"id", "via", "kind", ...}``: ``via`` is ``broker`` or ``flower``;
``kind`` is ``spec`` (``tandem.infer`` with ``spec``; the result is awaited), ``task`` (any task by
name with ``args``/``kwargs``; not awaited), ``raw`` (a message body sent as it is, with
``content_type``; not awaited), or ``http`` (``method``/``path`` with ``auth`` true or false; the
status is recorded). One JSON line per case is printed: ``{"id", "task_id", "result" | "status"}``.
"""

from __future__ import annotations

import base64
import json
import sys
import urllib.error
import urllib.request
import uuid
from typing import Any

from celery import Celery
from kombu import Connection, Exchange, Producer


def _http(url: str, method: str, body: Any, auth: str | None) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if auth:
        headers["Authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            text = response.read().decode()
            return response.status, json.loads(text) if text.startswith(("{", "[")) else text
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")[:500]


def _raw(broker: str, body: str, content_type: str, task: str) -> str:
    task_id = str(uuid.uuid4())
    headers = {
        "lang": "py",
        "task": task,
        "id": task_id,
        "root_id": task_id,
        "argsrepr": "",
        "kwargsrepr": "",
    }
    with Connection(broker) as conn:
        Producer(conn).publish(
            body,
            exchange=Exchange(""),
            routing_key="celery",
            content_type=content_type,
            content_encoding="utf-8",
            headers=headers,
            retry=True,
        )
    return task_id


def main(argv: list[str]) -> None:
    broker, cases_path = argv[0], argv[1]
    flower, auth = (argv[2], argv[3]) if len(argv) > 3 else (None, None)
    app = Celery(broker=broker, backend=broker)
    cases = json.loads(open(cases_path).read())  # noqa: SIM115
    pending: list[tuple[str, Any]] = []
    for case in cases:
        out: dict[str, Any] = {"id": case["id"]}
        if case["kind"] == "http":
            assert flower is not None
            status, body = _http(
                flower + case["path"], case["method"], case.get("body"), auth if case["auth"] else None
            )
            out.update(status=status, body=body)
        elif case["kind"] == "raw":
            out["task_id"] = _raw(
                broker, case["body"], case["content_type"], case.get("task", "tandem.infer")
            )
        elif case["via"] == "flower":
            assert flower is not None
            name = "tandem.infer" if case["kind"] == "spec" else case["name"]
            body = {"kwargs": {"spec": case["spec"]}} if case["kind"] == "spec" else case.get("body", {})
            status, reply = _http(f"{flower}/api/task/async-apply/{name}", "POST", body, auth)
            out.update(status=status, task_id=reply.get("task-id") if isinstance(reply, dict) else None)
            if case["kind"] == "spec" and out["task_id"]:
                pending.append((out["task_id"], out))
        else:
            name = "tandem.infer" if case["kind"] == "spec" else case["name"]
            kwargs = {"spec": case["spec"]} if case["kind"] == "spec" else case.get("kwargs", {})
            result = app.send_task(name, args=case.get("args", []), kwargs=kwargs)
            out["task_id"] = result.id
            if case["kind"] == "spec":
                pending.append((result.id, out))
        if out not in [p[1] for p in pending]:
            print(json.dumps(out), flush=True)
    for task_id, out in pending:
        try:
            out["result"] = app.AsyncResult(task_id).get(timeout=90, propagate=False)
        except Exception as exc:
            out["result"] = {"client_error": f"{type(exc).__name__}: {exc}"}
        if not isinstance(out["result"], dict):
            out["result"] = {"client_error": repr(out["result"])}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
