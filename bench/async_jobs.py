"""``python -m bench.async_jobs [--jobs N] [--latency S]``: many in-process jobs on one event loop.

Runs one mono job, then ``N`` at once (``asyncio.gather`` of ``MonoModelReasoner.arun``), against
an OpenAI-compatible test server in its own process (as a real model host is) that answers every
call after ``S`` seconds. Each job is two model calls with a tool call between them. Prints
``name: value`` lines:

* ``async_one_job_s``: one job alone (about ``2 * S``);
* ``async_jobs_together_s``: ``N`` jobs at once;
* ``async_concurrency_ratio``: the second divided by the first (goal: at most 1.5);
* ``sync_jobs_in_threads_s``: the same ``N`` jobs with ``run`` in ``N`` threads, for comparison;
* ``async_concurrency_goal_met``: whether the ratio is at most ``GOAL_RATIO``.

The ratio depends on the CPU left to this process: LiteLLM spends about 15 ms of CPU per call,
which a loaded machine stretches; measure on an idle one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from tandem.reasoner import MonoModelReasoner, Task
from tandem.reasoner.models.litellm_service import LiteLlmModelService
from tandem.toolkit import Tool
from tandem.workers.embedded import stop_process

ROOT = Path(__file__).resolve().parent.parent
DONE = "TASK_DONE\n<deliverable>5</deliverable>"
CALL = '<action>\n<function_call>\n{"name": "add", "args": {"a": 2, "b": 3}}\n</function_call>\n</action>'
GOAL_RATIO = 1.5
"""``N`` jobs at once should take at most this many times one job."""
TWO_STEP_SCRIPT = {"by_prompt": [{"match": "<function_call_result>", "reply": DONE}], "default": CALL}
"""A mono model: a tool call, then (once it has read the result) the deliverable."""


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def job_task(i: int) -> Task:
    """Job ``i``: its own goal and id, the ``add`` tool."""
    return Task(goal=f"job {i}", tools=[Tool.from_function(add)], job_id=str(i))


@contextmanager
def two_step_host(latency: float) -> Iterator[str]:
    """The API base of a test model host in its own process (``TWO_STEP_SCRIPT``), stopped by pid."""
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "script.json"
        script.write_text(json.dumps(TWO_STEP_SCRIPT))
        command = [sys.executable, "-m", "tests.openai_server", "--port", "0", "--latency", str(latency)]
        process = subprocess.Popen(
            [*command, "--script-file", str(script)], cwd=ROOT, stdout=subprocess.PIPE, text=True
        )
        try:
            assert process.stdout is not None
            line = process.stdout.readline().strip()
            if not line.startswith("listening on "):
                raise RuntimeError(f"the test model host did not start: {line!r}")
            yield line.removeprefix("listening on ")
        finally:
            stop_process(process)  # type: ignore[arg-type]


async def run_jobs(reasoner: MonoModelReasoner, count: int) -> float:
    """Seconds ``count`` jobs take together on this event loop (each must complete)."""
    started = time.monotonic()
    outcomes = await asyncio.gather(*(reasoner.arun(job_task(i)) for i in range(count)))
    elapsed = time.monotonic() - started
    failed = [o.error for o in outcomes if o.status != "completed"]
    if failed:
        raise RuntimeError(f"{len(failed)} of {count} jobs did not complete: {failed[:3]}")
    return elapsed


def main() -> None:
    """Measure and print the figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--latency", type=float, default=2.0)
    args = parser.parse_args()
    with two_step_host(args.latency) as url:
        host = LiteLlmModelService("openai/bench", api_base=url, api_key="k", timeout=120)
        reasoner = MonoModelReasoner(host)
        asyncio.run(run_jobs(reasoner, 1))  # warm-up: LiteLLM's first call sets up clients
        one = asyncio.run(run_jobs(reasoner, 1))
        together = asyncio.run(run_jobs(reasoner, args.jobs))
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            list(pool.map(lambda i: reasoner.run(job_task(i)), range(args.jobs)))
        threads = time.monotonic() - started
    figures = {
        "async_jobs": args.jobs,
        "async_latency_s": args.latency,
        "async_one_job_s": round(one, 3),
        "async_jobs_together_s": round(together, 3),
        "async_concurrency_ratio": round(together / one, 3),
        "sync_jobs_in_threads_s": round(threads, 3),
    }
    for name, value in figures.items():
        print(f"{name}: {json.dumps(value)}")
    print(f"async_concurrency_goal_met: {json.dumps(together / one <= GOAL_RATIO)}")


if __name__ == "__main__":
    main()
