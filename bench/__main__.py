"""``python -m bench [--quick] [--out PATH] [--markdown PATH]``: every benchmark figure.

Starts one tandem worker per role and two bare Celery workers on the local Redis (database 4,
flushed before and after), two OpenAI-compatible test servers in this process as the model
hosts, and prints one ``name: value`` line per figure as it is measured, then a
``<figure>_goal_met: true|false`` line per goal. The figures are written as JSON to ``--out``
(``bench/results.json``); a full run also writes the Markdown table ``bench/results-latest.md``
(``bench/RESULTS.md`` is the kept history, edited by hand: a run never overwrites it).
``--quick`` runs fewer repetitions and jobs and finishes in under a minute.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import chaos as bench_chaos
from bench import event_stream, overhead, throughput
from bench import toolkit as bench_toolkit
from bench.common import ROLES, Cluster, ModelHosts, RawWorker, flush_db, redis_url
from bench.models import call, plan_goal

CONCURRENCY = {"thinker": 8, "actor": 8, "tools": 8}
"""Threads per worker: 8 tools threads let the fan-out of 8 calls run at once."""

Figure = float | bool


class Goal:
    """A figure's goal: ``value <= limit`` (``at_most``) or ``value >= limit``."""

    def __init__(self, figure: str, limit: float, at_most: bool, text: str) -> None:
        self.figure, self.limit, self.at_most, self.text = figure, limit, at_most, text

    def met(self, value: float) -> bool:
        """Whether ``value`` meets the goal."""
        return value <= self.limit if self.at_most else value >= self.limit


GOALS = {
    "turn_overhead": Goal("turn_overhead_in_hops", 4.0, True, "at most 4 raw hops per round"),
    "distributed_vs_inprocess": Goal("distributed_vs_inprocess", 1.05, True, "at most 1.05"),
    "event_stream_overhead": Goal("event_stream_overhead", 1.05, True, "at most 1.05"),
    "throughput_ratio": Goal("throughput_ratio", 0.8, False, "at least 0.8"),
    "fanout_speedup": Goal("fanout_speedup", 6.0, False, "at least 6"),
    "worker_ready": Goal("worker_ready_s_max", 6.0, True, "under 6 s per worker"),
    "worker_rss": Goal("worker_rss_mb_max", 250.0, True, "under 250 MB per process"),
    "chaos_recovery": Goal(
        "chaos_kill_to_progress_p99_s",
        2 * bench_chaos.LEASE_SECONDS,
        True,
        f"under 2 × TANDEM_LEASE_SECONDS ({2 * bench_chaos.LEASE_SECONDS:g} s)",
    ),
    "chaos_stuck": Goal("chaos_stuck_jobs", 0.0, True, "no job left running"),
    "context_check": Goal(
        "context_check_us_per_request_100_rounds", 1000.0, True, "under 1 ms a request at 100 rounds"
    ),
    "context_over_budget": Goal(
        "context_job_fitting_requests_over_budget", 0.0, True, "no request over a 4,096-token budget"
    ),
    "context_20kb_job": Goal("context_job_20kb_completed", 1.0, False, "completes (needs issue 34 part 3)"),
    "chaos_duplicates": Goal("chaos_duplicate_tool_runs", 0.0, True, "no at_most_once call run twice"),
    "toolkit_recommend": Goal(
        "toolkit_recommend_ms", bench_toolkit.GOAL_MS, True, f"under {bench_toolkit.GOAL_MS:g} ms"
    ),
}


def _show(value: Figure) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if float(value).is_integer() or abs(value) >= 10_000:
        return f"{value:.0f}"
    return f"{value:.4g}"  # four significant digits


class Report:
    """Collects the figures and prints each as it comes."""

    def __init__(self) -> None:
        self.figures: dict[str, Figure] = {}

    def add(self, figures: dict[str, float]) -> None:
        """Record and print ``figures``."""
        for name, value in figures.items():
            self.figures[name] = value
            print(f"{name}: {_show(value)}", flush=True)

    def goals(self) -> None:
        """Add and print a ``*_goal_met`` line per goal whose figure was measured."""
        for name, goal in GOALS.items():
            value = self.figures.get(goal.figure)
            if isinstance(value, float | int) and not isinstance(value, bool):
                met = goal.met(float(value))
                self.figures[f"{name}_goal_met"] = met
                print(f"{name}_goal_met: {_show(met)}", flush=True)


def machine() -> dict[str, str]:
    """Where the figures were taken: CPUs, CPU model, RAM, versions."""
    model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    ram = "unknown"
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                ram = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    from redis import Redis

    redis_version = str(Redis.from_url(redis_url()).info("server").get("redis_version", "?"))
    return {
        "nproc": str(os.cpu_count()),
        "cpu": model,
        "ram": ram,
        "os": platform.platform(),
        "python": platform.python_version(),
        "celery": _version("celery"),
        "litellm": _version("litellm"),
        "redis_server": redis_version,
    }


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


def _quiet(run: Callable[[bool], dict[str, float]], quick: bool) -> dict[str, float]:
    """Call a benchmark that prints its own lines; its figures are printed by ``Report`` instead."""
    with contextlib.redirect_stdout(io.StringIO()):
        return run(quick)


def distributed(report: Report, quick: bool) -> None:
    """Every figure that needs workers: hops, rounds, model calls, throughput, fan-out, workers."""
    flush_db()
    report.add(overhead.litellm_import())  # before anything else runs: the import alone
    with ModelHosts(latency=0.0) as hosts:
        cluster = Cluster(hosts, CONCURRENCY)
        raws: list[RawWorker] = []
        try:
            ready = cluster.start()
            report.add({f"worker_ready_s_{role}": ready[role] for role in ROLES})
            report.add({"worker_ready_s_max": max(ready.values())})
            raws = [RawWorker(config).start() for config in ("plain", "tandem")]
            # The first job warms up connections and LiteLLM's first call in each worker: not measured.
            cluster.run(plan_goal([[call("noop")]]), 3, timeout=180)
            for raw in raws:
                raw.wait_ready()
            hops = overhead.raw_hops({raw.config: raw for raw in raws}, quick)
            report.add(hops)
            for raw in raws:
                raw.stop()
            raws = []
            calls = overhead.litellm_call(hosts, quick)
            report.add(calls)
            report.add(overhead.turn_overhead(cluster, hosts, {**hops, **calls}, quick))
            report.add(overhead.distributed_vs_inprocess(cluster, hosts, quick))
            report.add(throughput.fanout(cluster, hosts, quick))
            report.add({"throughput_concurrency_" + role: float(n) for role, n in CONCURRENCY.items()})
            print(f"# {throughput.BOUND_FORMULA}", flush=True)
            report.add(throughput.throughput(cluster, hosts, CONCURRENCY, quick))
            rss = cluster.rss_mb()
            report.add({f"worker_rss_mb_{role}": peak for role, (_now, peak) in rss.items()})
            report.add({"worker_rss_mb_max": max(peak for _now, peak in rss.values())})
        finally:
            for raw in raws:
                raw.stop()
            cluster.stop()
            flush_db()


def in_process(report: Report, quick: bool) -> None:
    """The parser and toolkit figures of their own issues."""
    from bench import context, parsers, toolkit

    report.add(_quiet(parsers.run, quick))
    report.add(toolkit.run(quick))
    report.add(_quiet(context.run, quick))


MARKDOWN_HEAD = """# Benchmark results

Taken with `{command}` on {cpu_count} CPUs ({cpu}), {ram} RAM, {os}; Python {python},
Celery {celery}, LiteLLM {litellm}, Redis {redis_server}. Run time {seconds:.0f} s. Workers: one per
role, thread pools of thinker {ct}, actor {ca}, tools {cl}; model hosts: the local OpenAI-compatible
test server (`tests/openai_server.py`), set latency as stated per figure. The machine is shared and
noisy: compare figures as ratios within one run.

## Goals

| figure | value | goal | met |
|---|---:|---|---|
{goals}

{split}

## All figures

| figure | value |
|---|---:|
{rows}
"""

MARKDOWN_SPLIT = """
Where a round's time goes (instant model, no-op tool): {turn:.1f} ms, or {hops:.1f} raw hops of
{raw:.2f} ms. The LiteLLM client's work for the two model calls: 2 x {litellm:.1f} ms. Celery's four
`Task.replace` hops under tandem's settings (task events for Flower): 4 x {replace:.1f} ms. Tandem's
own code: at most {own:.1f} ms.
"""

MARKDOWN_NOTES = """
## Definitions

See the docstrings of the docstrings of `bench/overhead.py` and `bench/throughput.py`):

- `raw_hop_ms`: one hop of a bare Celery chain of no-op tasks on the same Redis (threads pool, 1
  thread, JSON, late acks). `raw_replace_hop_ms`: the same with `Task.replace`, tandem's kind of hop.
  `*_tandem_config_ms`: both under the Celery settings tandem uses for Flower (task events,
  `task_track_started`, `result_extended`).
- `turn_overhead_ms`: a round of a dual job (Thinker turn, Actor turn with one tool call, the tool,
  the chord callback: 4 hops) with an instant model and a no-op tool, i.e. everything but model and
  tool time, LiteLLM's client work included; (12-round job - 2-round job) / 10.
  `round_phase_ms_*` split a round by the job's event times. `turn_overhead_excl_litellm_ms` leaves
  out 2 x `litellm_call_overhead_ms` (the LiteLLM client's work for the round's two model calls);
  `turn_overhead_tandem_own_ms` also leaves out 4 x `raw_replace_hop_tandem_config_ms` (Celery's
  part of the round's four hops): what remains is tandem's own code (an upper bound: a chord costs
  Celery more than a replace).
- `litellm_call_ms`: `LiteLlmModelService.generate` (model `openai/...`) on a 5-round conversation
  against the instant server; `http_call_ms` the same request as bare HTTP;
  `litellm_call_ms_hosted_vllm` the same call with LiteLLM's `hosted_vllm/` provider.
  `litellm_import_s`: `import litellm` in a fresh interpreter (model workers do it at start).
- `distributed_vs_inprocess`: a 5-round dual job (0.5 s model latency, a no-op tool in 4 rounds)
  through the workers, divided by `DualModelReasoner.run` of the same job in process.
- `throughput_ratio`: {throughput_jobs:.0f} concurrent dual jobs (0.5 s model latency, 3 rounds with a
  0.2 s tool, then the round that delivers); jobs/s achieved over the bound.
  {bound_formula}. p50/p99 are job times from submission (all jobs are sent at once).
- `fanout_speedup`: one Actor turn calling 8 tools of 1 s each: 8 s divided by the time from the
  Actor's reply to the start of the next round.
- `event_stream_overhead`: the 5-round dual job against hosts streaming 200-token replies, with
  `model_delta` events on, divided by the same job with them off (`bench/event_stream.py`); each
  mode on its own Redis server, so `redis_commands_per_round_*` count that cluster's commands
  (workers' idle polling included; `_for_deltas` is the difference).
- `worker_ready_s_*`: from starting the three workers together to each one answering a ping.
  `worker_rss_mb_*`: peak resident memory (VmHWM) of each worker process after all the runs.
- `scale_*` (hundreds of concurrent jobs, CPU and Redis commands per round) and `capacity_*` have
  their own commands: `python -m bench.scale`, `python -m bench.capacity` (docs/performance.md).
"""


def markdown(report: Report, info: dict[str, str], command: str, seconds: float) -> str:
    """The README section of the figures: goals first, then every figure."""
    f = report.figures
    goals = []
    for name, goal in GOALS.items():
        if goal.figure in f:
            met = "yes" if f.get(f"{name}_goal_met") else "**no**"
            goals.append(f"| `{goal.figure}` | {_show(f[goal.figure])} | {goal.text} | {met} |")
    rows = [f"| `{name}` | {_show(value)} |" for name, value in f.items() if not name.endswith("_goal_met")]
    split = ""
    if "turn_overhead_tandem_own_ms" in f:
        split = MARKDOWN_SPLIT.format(
            turn=f["turn_overhead_ms"],
            hops=f["turn_overhead_in_hops"],
            raw=f["raw_hop_ms"],
            litellm=f["litellm_call_overhead_ms"],
            replace=f["raw_replace_hop_tandem_config_ms"],
            own=f["turn_overhead_tandem_own_ms"],
        )
    head = MARKDOWN_HEAD.format(
        command=command,
        cpu_count=info["nproc"],
        cpu=info["cpu"],
        ram=info["ram"],
        os=info["os"],
        python=info["python"],
        celery=info["celery"],
        litellm=info["litellm"],
        redis_server=info["redis_server"],
        seconds=seconds,
        ct=CONCURRENCY["thinker"],
        ca=CONCURRENCY["actor"],
        cl=CONCURRENCY["tools"],
        goals="\n".join(goals),
        split=split.strip(),
        rows="\n".join(rows),
    )
    notes = MARKDOWN_NOTES.format(
        throughput_jobs=float(f.get("throughput_jobs", 0)),
        bound_formula=throughput.BOUND_FORMULA,
    )
    return head + notes


def main(argv: list[str] | None = None) -> int:
    """Run every benchmark, print the figures, write JSON (and Markdown for a full run)."""
    parser = argparse.ArgumentParser(
        prog="python -m bench", description="Run every benchmark; print its figures."
    )
    parser.add_argument("--quick", action="store_true", help="fewer repetitions and jobs (< 60 s)")
    parser.add_argument("--out", default="bench/results.json", help="where to write the JSON figures")
    parser.add_argument(
        "--markdown",
        default=None,
        help="where to write the Markdown table (default: bench/results-latest.md; none for --quick)",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    report = Report()
    distributed(report, args.quick)
    report.add(event_stream.run(args.quick))  # its own clusters and Redis servers
    in_process(report, args.quick)
    report.add(bench_chaos.chaos(args.quick))
    report.goals()
    seconds = time.monotonic() - started
    command = "python -m bench" + (" --quick" if args.quick else "")
    info = machine()
    document: dict[str, Any] = {
        "command": command,
        "quick": args.quick,
        "seconds": round(seconds, 1),
        "machine": info,
        "concurrency": CONCURRENCY,
        "throughput_bound_formula": throughput.BOUND_FORMULA,
        "figures": report.figures,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"# figures written to {out} ({seconds:.0f} s)", flush=True)
    latest = None if args.quick else "bench/results-latest.md"  # never the hand-kept bench/RESULTS.md
    target = args.markdown if args.markdown is not None else latest
    if target:
        Path(target).write_text(markdown(report, info, command, seconds))
        print(f"# table written to {target}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
