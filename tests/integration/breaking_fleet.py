"""A fleet of pods from one rendering of the manifests, and the calls a client makes to its API,
for ``tests/integration/test_breaking_image.py``.

``Fleet`` starts the thinker, actor, tools, API and Flower pods of a rendering, each with the
command and environment the rendering gives it (``tests/breaking_k8s.py``), on a Redis and an OTLP
collector of its own, and waits for each to answer its own probe path. Waits are on events (a port
that opens, a span that arrives), failing early when a pod exits.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.breaking_k8s import ROLES, containers, env_of, named
from tests.integration.breaking_pods import Collector, DataStore, Image, Pods, free_port, loopback_address
from tests.integration.otlp_receiver import OtlpReceiver

TOKEN = "quickstart-token-not-a-secret"  # the quick start's Secret (docs/kubernetes.md)
KUBELET = "10.244.3.17"
"""The pod IP a kubelet's HTTP probe names in its ``Host``."""


def wait_until(what: str, ready: Callable[[], bool], pods: Pods, timeout: float = 240) -> None:
    """Wait for an event (a port opening, a span arriving), failing early when a pod exits."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert not pods.exited(), f"waiting for {what}: {pods.exited()}"
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout:g} s"
        time.sleep(0.2)


def answers(url: str, host: str | None = None, **kw: Any) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return httpx.get(url, headers={"Host": host} if host else {}, timeout=5, **kw).status_code == 200
        except httpx.HTTPError:
            return False

    return check


def pod_of(objs: list[dict[str, Any]], role: str) -> tuple[list[str], dict[str, str], int]:
    """The command and environment of a role's pod in a rendering, with the port it serves moved
    to a free one (pods each own their network; here they share the machine's)."""
    workload = named(objs, "Deployment", f"tandem-{role}")
    container = containers(workload)[0]
    cmd, env, port = list(container["command"]), env_of(objs, workload, container), free_port()
    if "--port" in cmd:
        cmd[cmd.index("--port") + 1] = str(port)
    else:
        env["TANDEM_METRICS_PORT"] = str(port)
    return cmd, env, port


class Fleet:
    """The pods of one rendering, on a Redis and a collector of their own."""

    def __init__(
        self, image: Image, workdir: Path, objs: list[dict[str, Any]], names: tuple[str, ...]
    ) -> None:
        self.objs = objs
        self.address = loopback_address()
        self.redis = DataStore(self.address, workdir).start()
        self.collector = Collector(self.address).__enter__()
        hosts = dict.fromkeys(
            ("tandem-redis", "redis", "otel-collector.monitoring.svc", "jaeger"), self.address
        )
        self.pods = Pods(image, workdir, hosts)
        self.env: dict[str, dict[str, str]] = {}
        self.port: dict[str, int] = {}
        for role in ("thinker", "actor", "tools", "api", "flower"):
            cmd, env, port = pod_of(objs, role)
            self.env[role], self.port[role] = env, port
            self.pods.start(f"{names[0]}-{role}", cmd, env)
        for role in ROLES:
            wait_until(f"the {role} worker's metrics", answers(self.liveness(role)), self.pods)
        wait_until(
            "the API", answers(f"http://127.0.0.1:{self.port['api']}/healthz", f"{KUBELET}:8000"), self.pods
        )
        wait_until("Flower", answers(f"http://127.0.0.1:{self.port['flower']}/healthcheck"), self.pods)

    def liveness(self, role: str) -> str:
        path = containers(named(self.objs, "Deployment", f"tandem-{role}"))[0]["livenessProbe"]["httpGet"][
            "path"
        ]
        return f"http://127.0.0.1:{self.port[role]}{path}"

    def close(self) -> list[str]:
        gone = self.pods.stop_all()
        self.collector.__exit__(None, None, None)
        self.redis.stop()
        return gone


def api(port: int, method: str, path: str, host: str, **kw: Any) -> httpx.Response:
    """A request to the API listening on ``port``, as a caller that named ``host`` sends it."""
    headers = {"Host": host, "Authorization": f"Bearer {TOKEN}"}
    return httpx.request(method, f"http://127.0.0.1:{port}{path}", headers=headers, timeout=30, **kw)


def wait_final(port: int, job_id: str, host: str) -> dict[str, Any]:
    """Follow the job's event stream (SSE) to its ``final`` event; the job's status after it."""
    url = f"http://127.0.0.1:{port}/v1/jobs/{job_id}/events"
    headers = {"Host": host, "Authorization": f"Bearer {TOKEN}"}
    with httpx.stream("GET", url, headers=headers, timeout=httpx.Timeout(30, read=300)) as stream:
        assert stream.status_code == 200, stream.read()
        for line in stream.iter_lines():
            if line == "event: final":
                break
    status = api(port, "GET", f"/v1/jobs/{job_id}", host)
    assert status.status_code == 200, status.text
    return dict(status.json())


def spans_of(collector: OtlpReceiver, job_id: str) -> list[Any]:
    return [s for s in collector.spans() if s.attributes.get("tandem.job_id") == job_id]
