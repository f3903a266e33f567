"""A half-open Redis connection fails a call within the socket timeout instead of blocking for ever:
a private ``redis-server`` is frozen with SIGSTOP while a client holds a connection to it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest
import redis

from tandem.broker_config import Settings
from tandem.tasks.runtime import Runtime
from tandem.workers.embedded import free_port

pytestmark = pytest.mark.integration


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs a redis-server binary")
def test_a_frozen_redis_times_out_the_store_instead_of_blocking() -> None:
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="tandem-frozen-redis-")
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", workdir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"redis://127.0.0.1:{port}/0"
        deadline = time.monotonic() + 20
        while True:
            try:
                redis.Redis.from_url(url).ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        rt = Runtime(Settings.from_env({"TANDEM_REDIS_URL": url, "TANDEM_REDIS_SOCKET_TIMEOUT": "2"}))
        assert rt.store.status("job-1") is None  # a live connection in the pool
        os.kill(server.pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(redis.TimeoutError):
            rt.store.status("job-1")
        took = time.monotonic() - started
        assert took < 15, f"the call blocked {took:.1f} s"
    finally:
        os.kill(server.pid, signal.SIGCONT)
        server.terminate()
        server.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)
