"""An outside user's measure of what a dual round costs on workers, written from the user docs only.

``python -m bench.outside [--jobs 600] [--latency 5] [--concurrency 200] [--env NAME=VALUE ...]``
does what a user of README.md, docs/distributed.md and docs/model-hosts.md would do, with no
tandem import:

1. starts a private ``redis-server`` (no persistence) on a free port: broker, result backend and
   job store (``TANDEM_BROKER_URL`` only; the other two follow it, as docs/configuration.md says);
2. starts two stub OpenAI-compatible hosts (``bench.outside_hosts``) answering after
   ``--latency`` seconds, scripted so that every job is a dual job of exactly 2 rounds: the Actor
   calls the default toolkit's ``word_count`` once in round 1 and delivers in round 2;
3. starts ``tandem worker thinker|actor|tools --concurrency N``, one process each, with
   ``TANDEM_<ROLE>_MODEL=openai/...``, ``_API_BASE`` and ``_API_KEY`` pointing at the hosts;
4. once every worker answers a Celery ping, sends ``--jobs`` ``tandem.infer`` messages in one burst
   from a bare ``celery.Celery(broker=...)`` (``send_task("tandem.infer", kwargs={"spec": ...})``,
   no priority unless ``--priority``, as docs/distributed.md shows) and waits for each job's Celery
   result, read as a bare client can: ``MGET`` of Celery's result keys (``celery-task-meta-<id>``)
   of the jobs still open, every ``--poll`` seconds, on one connection whose commands are counted.
   The client has no result backend: with one, Celery's Redis backend SUBSCRIBEs to each task's
   result channel at ``send_task``, a client-side cost this harness leaves out. A job's end is the
   ``date_done`` of its result (when the worker wrote it), not when the poll saw it;
5. prints ``outside_<name>: <value>`` lines (see ``report``), the costs divided by the rounds run,
   ``jobs × 2``. ``--warmup N`` runs N jobs first, outside the measured window.

The bound: a step thread waits on its model call, so a role's worker has at most ``--concurrency``
calls in flight, each ``--latency`` seconds; a job makes 2 calls per role, so no schedule finishes
more than ``concurrency / (latency × 2)`` jobs a second. ``ratio_to_bound`` is jobs/s over that.

Worker CPU is utime+stime from ``/proc/<pid>/stat`` of each worker, its live descendants, and its
reaped children (cutime+cstime), read before the burst and after the last end. Redis CPU is
``INFO cpu`` (``used_cpu_sys + used_cpu_user``), Redis commands the sum of ``calls`` in
``INFO commandstats``, both as differences, less this harness's own polling commands. Everything it
starts is stopped by pid at the end, on Ctrl-C and on failure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any

import redis
from celery import Celery

ROLES = ("thinker", "actor", "tools")
ROUNDS_PER_JOB = 2
MODEL_CALLS_PER_JOB_PER_ROLE = 2  # one Thinker and one Actor call in each of the two rounds
RESULT_PREFIX = "celery-task-meta-"  # Celery's Redis result backend key of a task id
CLK_TCK = os.sysconf("SC_CLK_TCK")
ROOT = Path(__file__).resolve().parent.parent  # where ``python -m bench.outside_hosts`` runs


@dataclass
class Processes:
    """Every process the run started, stopped by pid in reverse order."""

    started: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    def start(
        self,
        name: str,
        argv: list[str],
        log: Path,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> int:
        """Start ``argv`` in its own session (a Ctrl-C at the terminal reaches only this harness,
        which then stops it in order), its output to ``log``; return its pid."""
        with log.open("wb") as out:
            proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True
            )
        self.started.append((name, proc))
        return proc.pid

    def check_alive(self) -> None:
        """Raise if one of the started processes has exited."""
        for name, proc in self.started:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} (pid {proc.pid}) exited with {proc.returncode}")

    def stop_all(self, grace: float = 15.0) -> None:
        """SIGTERM each process by pid (newest first), then SIGKILL what is left after ``grace``."""
        for _name, proc in reversed(self.started):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for _name, proc in reversed(self.started):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def free_port() -> int:
    """A free loopback TCP port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def proc_cpu_seconds(pid: int) -> float:
    """CPU seconds of ``pid``, its live descendants and its reaped children, from ``/proc``."""
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2 :].split()  # fields from the 3rd (state) on
        stats[int(entry)] = fields
        children.setdefault(int(fields[1]), []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        row = stats.get(current)
        if row is None:
            continue
        total += int(row[11]) + int(row[12])  # utime, stime
        if current == pid:
            total += int(row[13]) + int(row[14])  # cutime, cstime: children it reaped
        todo.extend(children.get(current, []))
    return total / CLK_TCK


class RedisProbe:
    """One connection to the private Redis that counts every command it sends."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url, single_connection_client=True, decode_responses=True)
        self.client.ping()  # connection set-up done here, before anything is counted
        self.commands = 0

    def cpu_seconds(self) -> float:
        """Redis's own CPU: ``used_cpu_sys + used_cpu_user`` (not counted: read outside the window)."""
        info = self.client.info("cpu")
        return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])

    def command_calls(self) -> int:
        """The sum of ``calls`` over ``INFO commandstats`` (this command itself counts only later)."""
        self.commands += 1
        info = self.client.info("commandstats")
        return sum(int(v["calls"]) for v in info.values() if isinstance(v, dict))

    def results(self, job_ids: list[str]) -> list[str | None]:
        """The Celery results of ``job_ids`` in one ``MGET`` (counted)."""
        self.commands += 1
        values: list[str | None] = self.client.mget([RESULT_PREFIX + job_id for job_id in job_ids])
        return values


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` percentile (0..100) of ``values`` (0.0 when empty)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def host_stats(port: int) -> dict[str, Any]:
    """What a stub host answered (``GET /stats``)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=10) as reply:
        data: dict[str, Any] = json.loads(reply.read())
        return data


def wait_for(what: str, check: Any, timeout: float, procs: Processes) -> Any:
    """Call ``check()`` until it returns something true; raise naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        procs.check_alive()
        try:
            value = check()
        except Exception:
            value = None
        if value:
            return value
        time.sleep(0.1)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


@dataclass
class Run:
    """The figures of one burst, before they are divided into per-round costs."""

    jobs: int
    submitted: dict[str, float]  # job id -> unix time of its send_task
    index: dict[str, int]  # job id -> the index tagged in its goal
    ended: dict[str, float] = field(default_factory=dict)  # job id -> date_done
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)  # role -> CPU seconds during the burst
    redis_cpu: float = 0.0
    redis_commands: int = 0
    own_commands: int = 0
    requests: dict[str, int] = field(default_factory=dict)  # role -> requests answered
    first_thinker: dict[int, float] = field(default_factory=dict)
    tool_ok: int = 0  # Thinker requests that read a succeeded word_count result


def start_services(
    args: argparse.Namespace, procs: Processes, logs: Path
) -> tuple[str, dict[str, int], dict[str, int]]:
    """Start Redis, the two hosts and one worker per role; return the Redis URL, the hosts' ports
    and the workers' pids."""
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    redis_bin = shutil.which("redis-server") or "redis-server"
    procs.start(
        "redis-server",
        [redis_bin, "--port", str(port), "--save", "", "--appendonly", "no"],
        logs / "redis.log",
    )
    wait_for("redis-server", lambda: redis.Redis.from_url(url).ping(), 20, procs)

    ready = logs / "hosts.json"
    procs.start(
        "model hosts",
        [
            sys.executable,
            "-m",
            "bench.outside_hosts",
            "--latency",
            str(args.latency),
            "--ready-file",
            str(ready),
        ],
        logs / "hosts.log",
        cwd=ROOT,
    )
    wait_for("the model hosts", ready.exists, 20, procs)
    ports: dict[str, int] = json.loads(ready.read_text())

    env = dict(os.environ)
    env["TANDEM_BROKER_URL"] = url
    for role in ("thinker", "actor"):
        upper = role.upper()
        env[f"TANDEM_{upper}_MODEL"] = f"openai/outside-{role}"
        env[f"TANDEM_{upper}_API_BASE"] = f"http://127.0.0.1:{ports[role]}/v1"
        env[f"TANDEM_{upper}_API_KEY"] = "outside-bench-key"
    for item in args.env:
        name, _, value = item.partition("=")
        env[name] = value
    tandem = shutil.which("tandem", path=str(Path(sys.executable).parent)) or shutil.which("tandem")
    if tandem is None:
        raise RuntimeError("no `tandem` command next to this Python or on PATH: pip install -e '.[worker]'")
    workers = {
        role: procs.start(
            f"tandem worker {role}",
            [tandem, "worker", role, "--concurrency", str(args.concurrency)],
            logs / f"worker-{role}.log",
            env,
        )
        for role in ROLES
    }
    return url, ports, workers


def wait_for_workers(client: Celery, procs: Processes, timeout: float) -> None:
    """Until a Celery ping is answered by a worker of each role (``<role>@<host>``)."""

    def answered() -> bool:
        replies = client.control.ping(timeout=1.0) or []
        names = {name.split("@")[0] for reply in replies for name in reply}
        return set(ROLES) <= names

    wait_for("a Celery ping answer from each worker", answered, timeout, procs)


def submit(client: Celery, args: argparse.Namespace, run: Run, label: str) -> None:
    """Send ``run.jobs`` ``tandem.infer`` messages in one burst, as the docs' bare client does;
    each goal carries ``outside <label> <index>:`` so the Thinker's host can tell the jobs apart."""
    options: dict[str, Any] = {} if args.priority is None else {"priority": 9 - args.priority}
    for i in range(run.jobs):
        spec = {"goal": f"outside {label} {i}: how many words are in the quoted text?", "max_rounds": 5}
        at = time.time()
        result = client.send_task("tandem.infer", kwargs={"spec": spec}, **options)
        run.submitted[result.id] = at
        run.index[result.id] = i


def wait_for_ends(probe: RedisProbe, run: Run, args: argparse.Namespace, procs: Processes) -> None:
    """Poll the Celery results of the jobs still open (one counted ``MGET`` each ``--poll``) until
    every job has one; a job's end is its result's ``date_done``."""
    deadline = time.monotonic() + args.timeout
    pending = list(run.submitted)
    while pending:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(pending)} of {run.jobs} jobs had not ended after {args.timeout:.0f} s")
        procs.check_alive()
        still = []
        for job_id, raw in zip(pending, probe.results(pending), strict=True):
            if raw is None:
                still.append(job_id)
                continue
            meta = json.loads(raw)
            run.results[job_id] = meta.get("result") or {}
            done = meta.get("date_done")
            run.ended[job_id] = datetime.fromisoformat(done).timestamp() if done else time.time()
        pending = still
        if pending:
            time.sleep(args.poll)


def burst(
    args: argparse.Namespace, url: str, ports: dict[str, int], workers: dict[str, int], procs: Processes
) -> Run:
    """Submit the jobs in one burst and wait for every end, measuring around it."""
    client = Celery("outside", broker=url)
    wait_for_workers(client, procs, timeout=120)
    probe = RedisProbe(url)
    if args.warmup:  # optional: jobs whose costs (first calls, lazy imports) are not counted
        warm = Run(jobs=args.warmup, submitted={}, index={})
        submit(client, args, warm, "warm-up")
        wait_for_ends(probe, warm, args, procs)
    with client.connection_for_write() as conn:  # connect before the window opens
        conn.ensure_connection(max_retries=3)
    requests_before = {role: int(host_stats(ports[role])["requests"]) for role in ("thinker", "actor")}
    tool_ok_before = int(host_stats(ports["thinker"])["tool_ok"])
    cpu_before = {role: proc_cpu_seconds(pid) for role, pid in workers.items()}
    redis_cpu_before = probe.cpu_seconds()
    calls_before = probe.command_calls()
    probe.commands = 1  # the INFO commandstats above is counted from the next reading on

    run = Run(jobs=args.jobs, submitted={}, index={})
    submit(client, args, run, "job")
    wait_for_ends(probe, run, args, procs)

    calls_after = probe.command_calls()
    run.redis_cpu = probe.cpu_seconds() - redis_cpu_before
    run.cpu = {role: proc_cpu_seconds(pid) - cpu_before[role] for role, pid in workers.items()}
    run.own_commands = probe.commands - 1  # the last INFO commandstats is not in its own reading
    run.redis_commands = calls_after - calls_before - run.own_commands
    for role in ("thinker", "actor"):
        stats = host_stats(ports[role])
        run.requests[role] = int(stats["requests"]) - requests_before[role]
        if role == "thinker":
            run.first_thinker = {int(k): float(v) for k, v in stats["first"].items()}
            run.tool_ok = int(stats["tool_ok"]) - tool_ok_before
    return run


def report(args: argparse.Namespace, run: Run) -> list[tuple[str, str]]:
    """The ``outside_<name>`` figures of a run, in print order."""
    completed = [j for j, r in run.results.items() if r.get("status") == "completed"]
    rounds = run.jobs * ROUNDS_PER_JOB
    first = min(run.submitted.values())
    last = max(run.ended.values())
    wall = last - first
    rate = len(completed) / wall if wall > 0 else 0.0
    bound = args.concurrency / (args.latency * MODEL_CALLS_PER_JOB_PER_ROLE)
    latencies = [run.ended[j] - run.submitted[j] for j in run.ended]
    delays = [
        run.first_thinker[run.index[j]] - t
        for j, t in run.submitted.items()
        if run.index[j] in run.first_thinker
    ]
    rounds_seen = [int(r.get("rounds") or 0) for r in run.results.values()]
    out: list[tuple[str, str]] = [
        ("jobs", str(run.jobs)),
        ("completed", str(len(completed))),
        (
            "not_completed",
            json.dumps({j: r.get("status") for j, r in run.results.items() if r.get("status") != "completed"})
            if len(completed) < run.jobs
            else "0",
        ),
        ("rounds_per_job_seen", f"{min(rounds_seen)}..{max(rounds_seen)}" if rounds_seen else "-"),
        ("rounds_counted", str(rounds)),
        ("wall_s", f"{wall:.2f}"),
        ("jobs_per_s", f"{rate:.2f}"),
        ("bound_jobs_per_s", f"{bound:.2f}"),
        ("ratio_to_bound", f"{rate / bound:.3f}"),
    ]
    for role in ROLES:
        out.append((f"cpu_ms_per_round_{role}", f"{1000 * run.cpu[role] / rounds:.2f}"))
    out += [
        ("cpu_ms_per_round_workers", f"{1000 * sum(run.cpu.values()) / rounds:.2f}"),
        ("redis_cpu_ms_per_round", f"{1000 * run.redis_cpu / rounds:.3f}"),
        ("redis_commands_per_round", f"{run.redis_commands / rounds:.1f}"),
        ("own_polling_commands", str(run.own_commands)),
        ("thinker_requests", str(run.requests["thinker"])),
        ("actor_requests", str(run.requests["actor"])),
        ("tool_results_read_by_thinker", str(run.tool_ok)),
        ("thinker_requests_per_round", f"{run.requests['thinker'] / rounds:.3f}"),
        ("actor_requests_per_round", f"{run.requests['actor'] / rounds:.3f}"),
        ("first_thinker_delay_p50_s", f"{percentile(delays, 50):.3f}"),
        ("first_thinker_delay_p99_s", f"{percentile(delays, 99):.3f}"),
        ("job_latency_p50_s", f"{percentile(latencies, 50):.3f}"),
        ("job_latency_p99_s", f"{percentile(latencies, 99):.3f}"),
        ("ideal_job_latency_s", f"{2 * MODEL_CALLS_PER_JOB_PER_ROLE * args.latency:.1f}"),
    ]
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m bench.outside", description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=600)
    parser.add_argument("--latency", type=float, default=5.0, help="seconds each model call takes")
    parser.add_argument("--concurrency", type=int, default=200, help="threads per worker")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="more environment for the workers (repeatable)",
    )
    parser.add_argument(
        "--priority",
        type=int,
        default=None,
        help="send tandem.infer with this job priority (0-9; Redis: priority=9-N); "
        "default: none, as the documented bare client does",
    )
    parser.add_argument("--warmup", type=int, default=0, help="jobs run and waited for before measuring")
    parser.add_argument("--poll", type=float, default=0.2, help="seconds between result polls")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for every end")
    parser.add_argument("--keep-logs", action="store_true", help="keep the processes' logs")
    args = parser.parse_args(argv)
    if any("=" not in item for item in args.env):
        parser.error("--env takes NAME=VALUE")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the figures; stop everything it started."""
    args = parse_args(argv)
    procs = Processes()
    logs = Path(tempfile.mkdtemp(prefix="tandem-outside-"))
    failed = True

    def terminate(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        print(f"outside_loadavg_before: {Path('/proc/loadavg').read_text().strip()}", flush=True)
        url, ports, workers = start_services(args, procs, logs)
        run = burst(args, url, ports, workers, procs)
        for name, value in report(args, run):
            print(f"outside_{name}: {value}", flush=True)
        print(f"outside_loadavg_after: {Path('/proc/loadavg').read_text().strip()}", flush=True)
        failed = False
        return 0
    except KeyboardInterrupt:
        print("outside: interrupted; stopping everything", file=sys.stderr)
        return 130
    except Exception as exc:
        print(f"outside: {exc}", file=sys.stderr)
        return 1
    finally:
        procs.stop_all()
        signal.signal(signal.SIGTERM, previous)
        if failed or args.keep_logs:
            print(f"outside: logs kept in {logs}", file=sys.stderr)
        else:
            shutil.rmtree(logs, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
