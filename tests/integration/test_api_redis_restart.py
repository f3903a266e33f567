"""``tandem api`` across a Redis restart: 503 while Redis is down, then a client that resumes
with ``Last-Event-ID`` gets every later event exactly once (AOF keeps the stream)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator

import httpx
import pytest
from redis import Redis

from tandem.tasks.job_events import RoundStarted
from tandem.tasks.spec import JobResult, JobSpec
from tandem.tasks.state.store import JobStore
from tandem.workers.embedded import free_port, stop_process
from tests.integration.test_api import ApiProcess, read_sse, sse_events

pytestmark = pytest.mark.integration


class OwnRedis:
    """A ``redis-server`` of this test only (append-only file on), stopped and restarted by pid."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            if os.environ.get("CI") == "true":
                pytest.fail("redis-server is not installed: CI needs it")
            pytest.skip("redis-server is not installed")
        self.binary = binary
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="tandem-redis-restart-")
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir, "--save", ""]
        self.process = subprocess.Popen(
            [self.binary, *args, "--appendonly", "yes", "--appendfsync", "always"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                Redis.from_url(self.url).ping()
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        stop_process(self.process, 10)
        self.process = None


@pytest.fixture
def own_redis() -> Iterator[OwnRedis]:
    server = OwnRedis()
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.dir, ignore_errors=True)


def test_a_stream_resumes_after_a_redis_restart(own_redis: OwnRedis) -> None:
    url = own_redis.url
    api = ApiProcess({"TANDEM_BROKER_URL": url, "TANDEM_RESULT_BACKEND": url, "TANDEM_REDIS_URL": url})
    store = JobStore(Redis.from_url(url))
    try:
        store.create("job", JobSpec(goal="g"))
        store.set_status("job", state="running")
        before = [store.publish("job", RoundStarted(round=r, max_rounds=9)) for r in range(3)]
        with httpx.Client(base_url=api.url, timeout=httpx.Timeout(30, read=60)) as client:
            got: list[dict[str, object]] = []
            with client.stream("GET", "/v1/jobs/job/events") as response:
                lines = response.iter_lines()
                got = sse_events(lines, limit=3)
                own_redis.stop()  # mid-stream
                with pytest.raises(httpx.HTTPError):  # dropped, never a clean end without ``final``
                    for _ in lines:
                        pass
            assert [e["id"] for e in got] == before

            down = client.get("/v1/jobs/job")
            assert down.status_code == 503 and down.headers["retry-after"] == "1"
            assert down.json()["error"]["code"] == "redis_unavailable"

            own_redis.start()  # the same data, from the append-only file
            store = JobStore(Redis.from_url(url))
            after = [store.publish("job", RoundStarted(round=r, max_rounds=9)) for r in (3, 4)]
            store.finish(JobResult(job_id="job", status="completed"), ttl=60)

            headers = {"Last-Event-ID": str(got[-1]["id"])}
            with client.stream("GET", "/v1/jobs/job/events", headers=headers) as response:
                assert response.status_code == 200
                rest = read_sse(response)
            assert [e["id"] for e in rest[:2]] == after
            assert [e["type"] for e in rest] == ["round_started", "round_started", "final"]
    finally:
        api.stop()
