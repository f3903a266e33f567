"""Any service can start a job: by task name from a process that never imports tandem, or
through Flower's HTTP API."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from tandem.workers.embedded import free_port
from tests.integration.conftest import RESULT_SECONDS, Cluster
from tests.integration.plan_model import goal_with_plan
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]

CLIENT = """
import json, sys
from celery import Celery

app = Celery(broker=sys.argv[1], backend=sys.argv[1])
result = app.send_task("tandem.infer", kwargs={"spec": json.loads(sys.argv[2])})
outcome = result.get(timeout=60)
tandem = {"tandem", "reasoner", "toolkit", "tasks", "workers", "broker_config"}
ours = sorted({m.split(".")[0] for m in sys.modules} & tandem)
print(json.dumps({"id": result.id, "result": outcome, "imported": ours}))
"""


def test_send_task_by_name_from_a_process_that_never_imports_tandem(dual_cluster: Hosts) -> None:
    cluster, _, _ = dual_cluster
    spec = {
        "goal": goal_with_plan("add once", [[{"name": "add", "args": {"a": 20, "b": 22}}]]),
        "max_rounds": 4,
    }
    out = subprocess.run(
        [sys.executable, "-c", CLIENT, cluster.url, json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=90,
        cwd="/",
        check=True,
    )
    reply = json.loads(out.stdout.strip().splitlines()[-1])
    assert reply["imported"] == []
    assert reply["result"]["status"] == "completed"
    assert reply["result"]["job_id"] == reply["id"]
    assert cluster.store.tool_result(reply["id"], 0, 1).output == "42"  # type: ignore[union-attr]


def _post(url: str, body: dict, auth: str) -> dict:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Authorization": "Basic " + base64.b64encode(auth.encode()).decode(),
        },
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_job_started_through_flowers_http_api(dual_cluster: Hosts) -> None:
    cluster, _, _ = dual_cluster
    port = free_port()
    flower = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tandem.workers.cli",
            "flower",
            "--port",
            str(port),
        ],
        env={**os.environ, **cluster.env, "FLOWER_BASIC_AUTH": "ops:secret-pass"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}/api/task/async-apply/tandem.infer"
        spec = {
            "goal": goal_with_plan("via flower", [[{"name": "add", "args": {"a": 1, "b": 1}}]]),
            "max_rounds": 4,
        }
        deadline = time.monotonic() + 90  # Flower's start-up is slow on a loaded machine
        while True:
            try:
                reply = _post(url, {"kwargs": {"spec": spec}}, "ops:secret-pass")
                break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        with pytest.raises(urllib.error.HTTPError, match="401"):
            _post(url, {"kwargs": {"spec": spec}}, "ops:wrong")
        result = cluster.app.AsyncResult(reply["task-id"]).get(timeout=RESULT_SECONDS)
        assert result["status"] == "completed"
        assert result["job_id"] == reply["task-id"]
    finally:
        flower.terminate()
        flower.wait(10)
