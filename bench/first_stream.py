"""``first_stream``: does a fresh worker's first streamed reply stream like the rest? (issue 27, item 5)

Each sample starts a ``redis-server`` of its own on a free loopback port and one fresh worker per
role (thinker, actor, tools) whose hosts stream every reply (``TANDEM_<ROLE>_STREAM``, the hosts of
``bench.event_stream``: 200 words of reasoning in 5-character chunks, 4 ms apart), then runs
``JOBS`` one-round dual jobs one after another. For each job, the Thinker's **time to first token**
is the time from its request reaching the host to the job's first ``model_delta`` event of the
Thinker (what a client following the job sees). The figures are the medians over the samples of:

- ``first_stream_ttft_s_first``: the first job on a fresh worker;
- ``first_stream_ttft_s_later``: the later jobs (the median of their medians);
- ``first_stream_submit_to_token_s_first`` / ``_later``: the same from the job's submission (the
  workers warm up before they are ready, so a first job sent then waits for no warm-up);
- ``first_stream_worker_ready_s``: from launching the three workers together to the slowest of them
  answering a ping (the goal of issue 27: at most 3 s).

Run alone: ``python -m bench.first_stream [--quick] [--samples N]``.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable

from bench.common import Cluster, median
from bench.event_stream import RedisServer, StreamingHosts, streaming
from bench.models import plan_goal
from bench.models import thinker as plan_thinker
from tests.openai_server import RecordedRequest, Reply

JOBS = 4
CONCURRENCY = {"thinker": 2, "actor": 2, "tools": 2}


class Arrivals:
    """Wraps a host's script to note when each request reached the host (``time.time()``)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._lock = threading.Lock()

    def wrap(self, script: Callable[[RecordedRequest], Reply]) -> Callable[[RecordedRequest], Reply]:
        def noted(request: RecordedRequest) -> Reply:
            with self._lock:
                self.times.append(time.time())
            return script(request)

        return noted


def _first_thinker_delta(cluster: Cluster, job_id: str) -> float:
    for event in cluster.store.read_events(job_id, count=100_000):
        if event.type == "model_delta" and getattr(event, "role", "") == "thinker":
            return event.at
    raise RuntimeError(f"job {job_id} has no model_delta event of the Thinker: is streaming on?")


def sample(jobs: int) -> tuple[float, list[float], list[float]]:
    """One fresh cluster: its ready time, and for each job the Thinker's time to first token
    from its request reaching the host, and from the job's submission."""
    server = RedisServer()
    hosts = StreamingHosts()
    arrivals = Arrivals()
    hosts.thinker.set_script(arrivals.wrap(streaming(plan_thinker)))
    cluster: Cluster | None = None
    try:
        with hosts:
            cluster = Cluster(
                hosts,
                CONCURRENCY,
                url=server.url,
                TANDEM_THINKER_STREAM="true",
                TANDEM_ACTOR_STREAM="true",
            )
            ready = max(cluster.start(timeout=180).values())
            ttft, from_submit = [], []
            for _ in range(jobs):
                seen = len(arrivals.times)
                job_id, sent = cluster.submit(plan_goal([]), 2)
                cluster.wait([job_id], 300)
                first = _first_thinker_delta(cluster, job_id)
                ttft.append(first - arrivals.times[seen])
                from_submit.append(first - sent)
            return ready, ttft, from_submit
    finally:
        if cluster is not None:
            cluster.stop()
        server.stop()


def run(quick: bool, samples: int | None = None) -> dict[str, float]:
    """The figures (see the module docstring)."""
    count = samples or (2 if quick else 3)
    ready, first, later, submit_first, submit_later = [], [], [], [], []
    for _ in range(count):
        took, ttft, from_submit = sample(JOBS)
        ready.append(took)
        first.append(ttft[0])
        later.append(median(ttft[1:]))
        submit_first.append(from_submit[0])
        submit_later.append(median(from_submit[1:]))
    return {
        "first_stream_ttft_s_first": median(first),
        "first_stream_ttft_s_later": median(later),
        "first_stream_submit_to_token_s_first": median(submit_first),
        "first_stream_submit_to_token_s_later": median(submit_later),
        "first_stream_worker_ready_s": median(ready),
    }


def main(argv: list[str] | None = None) -> int:
    """Print the figures, one ``name: value`` line each."""
    parser = argparse.ArgumentParser(prog="python -m bench.first_stream", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="two fresh clusters instead of three")
    parser.add_argument("--samples", type=int, default=None, help="fresh clusters to start")
    args = parser.parse_args(argv)
    for name, value in run(args.quick, args.samples).items():
        print(f"{name}: {value:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
