"""``event_stream_overhead``: what live tokens (``model_delta`` events) cost a job.

The same 5-round dual job (a no-op tool in four rounds, then the round that delivers) runs on two
clusters side by side, one with ``TANDEM_EVENT_DELTAS`` on and one with it off, against model
hosts that stream every reply: 200 words of reasoning plus the plan's content, five characters a
chunk, ``CHUNK_DELAY`` seconds apart (a reply takes about a second, like a fast host's). Jobs alternate
between the clusters so a noisy neighbour hits both alike.

Each cluster has its own ``redis-server`` on a free loopback port (stopped by pid at the end), so
``INFO commandstats`` counts only that cluster's commands: the figures are the job-time ratio
(on / off, goal at most 1.05), Redis commands per round in each mode and their difference, and the
``model_delta`` events per round.

Run alone: ``python -m bench.event_stream [--quick]``.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any

from redis import Redis

from bench.common import Cluster, ModelHosts, median
from bench.models import actor as plan_actor
from bench.models import call, plan_goal
from bench.models import thinker as plan_thinker
from tandem.workers.embedded import free_port, stop_process
from tests.openai_server import OpenAIServer, RecordedRequest, Reply

ROUNDS = 5
REASONING_WORDS = 200
CHUNK_SIZE = 5
CHUNK_DELAY = 0.004
CONCURRENCY = {"thinker": 2, "actor": 2, "tools": 2}
_PAD = " ".join(f"step{i % 10}" for i in range(REASONING_WORDS))


def streaming(script: Callable[[RecordedRequest], Reply]) -> Callable[[RecordedRequest], Reply]:
    def reply(request: RecordedRequest) -> Reply:
        base = script(request)
        base.reasoning_content = _PAD
        base.chunk_size = CHUNK_SIZE
        base.chunk_delay = CHUNK_DELAY
        return base

    return reply


class StreamingHosts(ModelHosts):
    """The plan-following hosts of ``bench.models``, streaming 200-token replies."""

    def __init__(self) -> None:
        self.thinker = OpenAIServer(streaming(plan_thinker))
        self.actor = OpenAIServer(streaming(plan_actor))


class RedisServer:
    """A throw-away ``redis-server`` on a free loopback port (no persistence)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = tempfile.TemporaryDirectory(prefix="tandem-bench-redis-")
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            cwd=self.dir.name,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.url = f"redis://127.0.0.1:{self.port}/0"
        deadline = time.monotonic() + 20
        while True:
            try:
                Redis.from_url(self.url).ping()
                break
            except Exception:
                if time.monotonic() > deadline:
                    self.stop()
                    raise
                time.sleep(0.05)

    def commands(self) -> int:
        """Commands this server has run so far (``INFO commandstats``, every command)."""
        stats: dict[str, Any] = Redis.from_url(self.url).info("commandstats")
        return sum(int(v["calls"]) for v in stats.values())

    def stop(self) -> None:
        """Stop the server by pid."""
        stop_process(self.process, 5)
        self.dir.cleanup()


def run(quick: bool) -> dict[str, float]:
    """The figures (see the module docstring)."""
    goal = plan_goal([[call("noop")] for _ in range(ROUNDS - 1)])
    repeats = 2 if quick else 5
    figures: dict[str, float] = {}
    servers: list[RedisServer] = []
    clusters: dict[str, Cluster] = {}
    with StreamingHosts() as hosts:
        try:
            for mode in ("on", "off"):
                server = RedisServer()
                servers.append(server)
                flags = {"TANDEM_EVENT_DELTAS": "true" if mode == "on" else "false"}
                clusters[mode] = Cluster(
                    hosts,
                    CONCURRENCY,
                    url=server.url,
                    TANDEM_THINKER_STREAM="true",
                    TANDEM_ACTOR_STREAM="true",
                    **flags,
                )
                clusters[mode].start(timeout=120)
            for cluster in clusters.values():  # warm-up: connections, LiteLLM's first call
                cluster.run(goal, ROUNDS + 1, timeout=300)
            seconds: dict[str, list[float]] = {"on": [], "off": []}
            commands: dict[str, list[float]] = {"on": [], "off": []}
            deltas: list[float] = []
            for _ in range(repeats):
                for (mode, cluster), server in zip(clusters.items(), servers, strict=True):
                    before = server.commands()
                    took, result = cluster.run(goal, ROUNDS + 1, timeout=300)
                    if result.rounds != ROUNDS:
                        raise RuntimeError(f"the job ended after {result.rounds} rounds, not {ROUNDS}")
                    commands[mode].append((server.commands() - before) / ROUNDS)
                    seconds[mode].append(took)
                    if mode == "on":
                        events = cluster.store.read_events(result.job_id, count=100_000)
                        deltas.append(sum(1 for e in events if e.type == "model_delta") / ROUNDS)
        finally:
            for cluster in clusters.values():
                cluster.stop()
            for server in servers:
                server.stop()
    figures["event_stream_overhead"] = median(seconds["on"]) / median(seconds["off"])
    figures["event_stream_job_s_deltas_on"] = median(seconds["on"])
    figures["event_stream_job_s_deltas_off"] = median(seconds["off"])
    figures["redis_commands_per_round_deltas_on"] = median(commands["on"])
    figures["redis_commands_per_round_deltas_off"] = median(commands["off"])
    figures["redis_commands_per_round_for_deltas"] = median(commands["on"]) - median(commands["off"])
    figures["model_delta_events_per_round"] = median(deltas)
    return figures


def main(argv: list[str] | None = None) -> int:
    """Print the figures, one ``name: value`` line each."""
    parser = argparse.ArgumentParser(prog="python -m bench.event_stream", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="two jobs per mode instead of five")
    args = parser.parse_args(argv)
    for name, value in run(args.quick).items():
        print(f"{name}: {value:.4g}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
