"""``python -m bench.sse``: 1,000 concurrent event streams (SSE) on one ``tandem api`` process.

Starts a ``redis-server`` of its own on a free loopback port (so every connection it lists is the
API's or this benchmark's) and one ``tandem api`` process on it, with ten tokens (the default
limit of 100 streams per token lets each hold 100; a smaller run sets the limit to its share).
Then:

1. creates ``--jobs`` running jobs and opens ``--clients`` SSE clients spread over them (plain
   asyncio sockets reading the chunked stream, so the client side costs little CPU);
2. writes ``--events`` ``model_delta`` events per job straight into the job store, a round of one
   event per job every ``INTERVAL`` seconds, then ends each job (its ``final`` event);
3. meanwhile times ``GET /healthz`` and the status of a job nobody streams, every 50 ms, from
   processes of their own;
4. at the peak, reads the API process's RSS (``ps``, checked against ``/proc/<pid>/status``) and its
   Redis connections (Redis's ``CLIENT LIST``, checked against the sockets ``/proc`` shows the API
   holding to Redis's port); ``CLIENT LIST`` also shows how many of them wait in ``XREAD`` (the
   readers: one per job);
5. waits for every stream to end and checks that every client got every event once, in order;
   one more stream for a token already holding its 100 must get 429.

Prints one ``name: value`` line per figure. Everything runs on 127.0.0.1 and is bounded by
``--timeout`` seconds; every process it starts is stopped by its pid.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redis import Redis

from bench.common import percentile
from tandem.tasks.job_events import ModelDelta
from tandem.tasks.spec import JobResult, JobSpec
from tandem.tasks.state.store import JobStore
from tandem.workers.embedded import free_port, stop_process

TOKENS = [f"bench-sse-token-{i:02d}-0123456789" for i in range(10)]
INTERVAL = 0.1
"""Seconds between two rounds of events (one per job): 10 events a second per job, the most
``model_delta`` events a reply publishes (``TANDEM_DELTA_INTERVAL_MS=100``)."""


# -- processes ------------------------------------------------------------------------------------


class OwnRedis:
    """A ``redis-server`` of this benchmark only, on a free loopback port, without persistence."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.dir = tempfile.mkdtemp(prefix="tandem-bench-sse-")
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(
            ["redis-server", *args, "--dir", self.dir, "--maxclients", "10000"],
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
                    self.stop()
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        stop_process(self.process, 10)


class ApiServer:
    """``tandem api`` as a child process on a free loopback port."""

    def __init__(self, redis_url: str, extra_env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.log = Path(tempfile.mkdtemp(prefix="tandem-bench-api-")) / "api.log"
        env = {
            **os.environ,
            "TANDEM_BROKER_URL": redis_url,
            "TANDEM_RESULT_BACKEND": redis_url,
            "TANDEM_REDIS_URL": redis_url,
            "TANDEM_API_TOKENS": ",".join(TOKENS),
            **(extra_env or {}),
        }
        cmd = [
            sys.executable,
            "-m",
            "tandem.workers.cli",
            "api",
            "--port",
            str(self.port),
            "--log-level",
            "warning",
        ]
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.pid = self.process.pid
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"tandem api exited: {self.log.read_text()}")
            if _http_status(self.port, "/healthz") == 200:
                return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"tandem api did not answer in 60 s: {self.log.read_text()}")

    def stop(self) -> None:
        stop_process(self.process, 15)


def _http_status(port: int, path: str) -> int:
    import httpx

    try:
        return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=2).status_code
    except httpx.TransportError:
        return 0


# -- what /proc and ps say of a process ---------------------------------------------------------------


def rss_ps_kib(pid: int) -> int:
    """The resident set size of ``pid`` in KiB, as ``ps`` reports it."""
    return int(subprocess.run(["ps", "-o", "rss=", "-p", str(pid)], capture_output=True, text=True).stdout)


def rss_proc_kib(pid: int) -> int:
    """The resident set size of ``pid`` in KiB, from ``/proc/<pid>/status`` (``VmRSS``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def tcp_sockets(pid: int) -> list[tuple[int, int, str]]:
    """``(local port, remote port, state)`` of every TCP socket ``pid`` holds, from ``/proc``."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            parts = row.split()
            if parts[9] in inodes:
                local, remote = parts[1].rsplit(":", 1)[1], parts[2].rsplit(":", 1)[1]
                state = {"01": "ESTABLISHED", "0A": "LISTEN"}.get(parts[3], parts[3])
                found.append((int(local, 16), int(remote, 16), state))
    return found


def redis_clients(redis: Redis, skip_name: str = "bench") -> list[dict[str, str]]:
    """Redis's ``CLIENT LIST``, without the connections named ``skip_name`` (this benchmark's)."""
    return [c for c in redis.client_list() if c.get("name") != skip_name]


# -- the SSE clients ----------------------------------------------------------------------------------


@dataclass
class Client:
    """What one SSE client saw."""

    job: str
    token: str
    status: int = 0
    connected: bool = False
    ended: bool = False
    port: int = 0
    """The client's own TCP port (to find its connection in the API's sockets)."""
    ids: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    lags: list[float] = field(default_factory=list)
    error: str = ""


async def follow(port: int, client: Client) -> None:
    """Read one job's event stream until it ends (plain HTTP/1.1 over a socket, chunked)."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    except OSError as exc:
        client.error = f"connect: {exc}"
        return
    client.port = int(writer.get_extra_info("sockname")[1])
    try:
        writer.write(
            f"GET /v1/jobs/{client.job}/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {client.token}\r\nAccept: text/event-stream\r\n\r\n".encode()
        )
        await writer.drain()
        client.status = int((await reader.readline()).split()[1])
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        if client.status != 200:
            return
        buffer = ""
        while True:
            size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                client.ended = client.types[-1:] == ["final"]
                return
            buffer += (await reader.readexactly(size + 2))[:-2].decode()
            while "\n\n" in buffer:
                block, buffer = buffer.split("\n\n", 1)
                _read_block(block, client)
    except (OSError, ValueError, IndexError, asyncio.IncompleteReadError) as exc:
        client.error = f"{type(exc).__name__}: {exc}"
    finally:
        writer.close()


def _read_block(block: str, client: Client) -> None:
    fields = dict(
        line.split(": ", 1) for line in block.split("\n") if ": " in line and not line.startswith(":")
    )
    if "retry" in block.split("\n", 1)[0]:
        client.connected = True
    if "id" in fields:
        client.ids.append(fields["id"])
        client.types.append(fields.get("event", ""))
        client.lags.append(time.time() - float(json.loads(fields["data"])["at"]))


class Prober:
    """Times ``GET path`` every 50 ms from a process of its own (this one's event loop is busy with
    the clients), a fresh connection each time, as a load balancer's probe makes."""

    def __init__(self, port: int, path: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.sse", "--probe", f"http://127.0.0.1:{port}{path}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def stop(self) -> list[tuple[float, float]]:
        """Stop probing; ``(when, milliseconds)`` of each probe (``when``: ``time.time()`` at its start)."""
        out, _ = self.process.communicate("stop\n", timeout=30)
        return [(float(when), float(ms)) for when, ms in (pair.split(",") for pair in out.split())]


def window(samples: list[tuple[float, float]], begin: float, end: float) -> list[float]:
    """The latencies of the probes that started between ``begin`` and ``end``."""
    return [ms for when, ms in samples if begin <= when < end]


def probe_main(url: str) -> None:
    """The prober's process: probe ``url`` until a line arrives on stdin, then print the latencies."""
    import threading

    import httpx

    stop = threading.Event()

    def wait_for_stop() -> None:
        sys.stdin.readline()
        stop.set()

    threading.Thread(target=wait_for_stop, daemon=True).start()
    times = []
    headers = {"Authorization": f"Bearer {TOKENS[0]}", "Connection": "close"}
    while not stop.is_set():
        when, began = time.time(), time.perf_counter()
        status = httpx.get(url, headers=headers, timeout=30).status_code
        if status != 200:
            raise SystemExit(f"GET {url} answered {status} during the run")
        times.append(f"{when:.3f},{(time.perf_counter() - began) * 1000:.2f}")
        stop.wait(0.05)
    print(" ".join(times))


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) ``pid`` has used, from ``/proc/<pid>/stat``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- the run ------------------------------------------------------------------------------------------


def _write_events(store: JobStore, jobs: list[str], events: int) -> float:
    """``events`` model deltas per job, a round every ``INTERVAL`` s, then each job's end; seconds taken."""
    began = time.monotonic()
    for seq in range(events):
        for job in jobs:
            store.publish(
                job, ModelDelta(round=0, role="actor", attempt="bench", seq=seq, content=f"token {seq} ")
            )
        time.sleep(INTERVAL)
    for job in jobs:
        store.finish(JobResult(job_id=job, status="completed", deliverable="done"), ttl=600)
    return time.monotonic() - began


async def run(clients: int, jobs: int, events: int) -> dict[str, Any]:
    """The benchmark on processes it starts and stops; returns the figures."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * clients + 1024)), hard))
    redis_server = OwnRedis()
    api: ApiServer | None = None
    figures: dict[str, Any] = {}
    try:
        redis = Redis.from_url(redis_server.url, client_name="bench")
        store = JobStore(redis)
        names = [f"bench-sse-{j}" for j in range(jobs)] + ["bench-sse-quiet"]
        for name in names:
            store.create(name, JobSpec(goal="bench"))
            store.set_status(name, state="running")
        per_token = -(-clients // len(TOKENS))  # every token at its limit (100 for 1,000 clients)
        api = ApiServer(redis_server.url, {"TANDEM_API_MAX_STREAMS": str(per_token)})
        figures["api_rss_idle_mib"] = round(rss_ps_kib(api.pid) / 1024, 1)
        probers = [Prober(api.port, "/healthz"), Prober(api.port, f"/v1/jobs/{names[-1]}")]
        phases = {"no_streams": time.time()}
        await asyncio.sleep(4.0)  # the probers start, then time the API with no stream open
        followers = [Client(job=names[i % jobs], token=TOKENS[i % len(TOKENS)]) for i in range(clients)]
        tasks = []
        began = time.monotonic()
        phases["connecting"] = time.time()
        for start in range(0, clients, 100):  # in bursts, as a crowd of browsers would come
            tasks += [asyncio.create_task(follow(api.port, c)) for c in followers[start : start + 100]]
            await asyncio.sleep(0.05)
        while sum(c.connected for c in followers) < clients and time.monotonic() - began < 60:
            if any(c.error or (c.status and c.status != 200) for c in followers):
                break
            await asyncio.sleep(0.05)
        figures["connect_seconds"] = round(time.monotonic() - began, 2)
        figures["clients_connected"] = sum(c.connected for c in followers)
        ours = {c.port for c in followers}
        held = [
            s for s in tcp_sockets(api.pid) if s[0] == api.port and s[1] in ours and s[2] == "ESTABLISHED"
        ]
        figures["clients_connected_by_proc"] = len(set(held))
        refused = Client(job=names[0], token=TOKENS[0])
        await asyncio.wait_for(follow(api.port, refused), 10)
        figures["stream_over_the_token_limit_status"] = refused.status

        phases["streams_open"] = time.time()
        await asyncio.sleep(2.0)  # every stream open, no event flowing
        phases["streaming"] = time.time()
        cpu_before, clock_before = cpu_seconds(api.pid), time.monotonic()
        bench_before = cpu_seconds(os.getpid())
        writing = asyncio.create_task(
            asyncio.to_thread(
                _write_events,
                JobStore(Redis.from_url(redis_server.url, client_name="bench")),
                names[:jobs],
                events,
            )
        )
        await asyncio.sleep(min(1.0, events * INTERVAL / 2))  # the peak: every stream open, events flowing
        figures["api_rss_mib"] = round(rss_ps_kib(api.pid) / 1024, 1)
        figures["api_rss_mib_by_proc"] = round(rss_proc_kib(api.pid) / 1024, 1)
        listed = redis_clients(redis)
        figures["redis_connections"] = len(listed)
        figures["redis_connections_by_proc"] = sum(
            1 for s in tcp_sockets(api.pid) if s[1] == redis_server.port
        )
        figures["redis_readers_in_xread"] = sum(1 for c in listed if c.get("cmd") == "xread")
        figures["write_seconds"] = round(await writing, 2)
        deadline = time.monotonic() + 60
        while not all(t.done() for t in tasks) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        figures["api_cpu_share_while_streaming"] = round(
            (cpu_seconds(api.pid) - cpu_before) / (time.monotonic() - clock_before), 2
        )
        figures["bench_cpu_share_while_streaming"] = round(
            (cpu_seconds(os.getpid()) - bench_before) / (time.monotonic() - clock_before), 2
        )
        phases["end"] = time.time()
        health, quiet = (p.stop() for p in probers)
        for t in tasks:
            t.cancel()
        for phase, begin, end in zip(phases, phases.values(), list(phases.values())[1:], strict=False):
            if phase == "connecting":
                continue
            for label, samples in (("healthz", health), ("other_job_status", quiet)):
                got = window(samples, begin, end)
                figures[f"{label}_ms_p50_{phase}"] = round(percentile(got, 50), 1)
                figures[f"{label}_ms_p99_{phase}"] = round(percentile(got, 99), 1)
            figures[f"probes_{phase}"] = len(window(health, begin, end))

        expected = events + 1  # the deltas and the final event
        per_client = [len(c.ids) for c in followers]
        complete = [
            c
            for c in followers
            if c.ended and len(c.ids) == expected == len(set(c.ids)) and c.ids == sorted(c.ids, key=_order)
        ]
        lags = [lag for c in followers for lag in c.lags]
        figures.update(
            clients=clients,
            jobs=jobs,
            events_per_job=expected,
            events_per_client_min=min(per_client),
            events_per_client_max=max(per_client),
            clients_with_every_event=len(complete),
            events_delivered=sum(per_client),
            delivery_ms_p50=round(percentile(lags, 50) * 1000, 1),
            delivery_ms_p99=round(percentile(lags, 99) * 1000, 1),
            client_errors=sorted({c.error for c in followers if c.error})[:3],
        )
        await asyncio.sleep(0.5)
        figures["redis_connections_after"] = len(redis_clients(redis))
        return figures
    finally:
        if api is not None:
            api.stop()
        redis_server.stop()


def _order(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its figures; exit 1 when a client missed an event."""
    parser = argparse.ArgumentParser(prog="python -m bench.sse", description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--events", type=int, default=100, help="model_delta events per job")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds the whole run may take")
    parser.add_argument("--probe", help=argparse.SUPPRESS)  # the prober's own process
    args = parser.parse_args(argv)
    if args.probe:
        probe_main(args.probe)
        return 0
    if args.clients > 100 * len(TOKENS):
        parser.error(f"--clients at most {100 * len(TOKENS)} (ten tokens of 100 streams each)")
    figures = asyncio.run(asyncio.wait_for(run(args.clients, args.jobs, args.events), args.timeout))
    for name, value in figures.items():
        print(f"{name}: {value}", flush=True)
    return 0 if figures["clients_with_every_event"] == args.clients else 1


if __name__ == "__main__":
    sys.exit(main())
