"""The in-process loop's own cost per round: ``run`` and ``arun`` of the three reasoners with an
instant scripted model and a no-op tool, so what is timed is the loop (views, requests, storing,
decisions, the tool round), not a model or a tool.

``loop_cpu_us_per_round_<kind>_<run|arun>``: CPU microseconds of this process per round (every
thread's: the tool round's too), as the difference between a ``LONG``-round and a ``SHORT``-round
job divided by the rounds between them (the reasoner's set-up and the first and last rounds cancel
out), the median of ``--repeats`` pairs. CPU time, not wall time, so that other processes on a
shared machine move the figure less; ``loop_us_per_round_*`` is the same in wall time. A round is one tool
call and the model turns around it (Thinker and Actor for dual). Only the public API is used, so
the same file measures an older checkout: ``cd OLD && python -m bench.loop_cost``.

    python -m bench.loop_cost [--repeats N]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import sys
import time
from typing import Any

from tandem.reasoner import DualModelReasoner, MonoModelReasoner, ReActReasoner, ScriptedModelService, Task
from tandem.toolkit import Tool

SHORT, LONG = 2, 22
CALL = '<action><function_call>{"name": "noop", "args": {}}</function_call></action>'


def noop() -> str:
    """Do nothing."""
    return "ok"


NOOP = Tool.from_function(noop)


def _actor(rounds: int, last: str) -> ScriptedModelService:
    """A model that calls ``noop`` in every round but the last, where it answers ``last``."""
    turn = itertools.count()
    return ScriptedModelService(lambda sys_prompt, messages: CALL if next(turn) < rounds - 1 else last)


def _reasoner(kind: str, rounds: int) -> tuple[Any, Task]:
    if kind == "dual":
        thinker = ScriptedModelService(lambda sys_prompt, messages: "<instruction>call noop</instruction>")
        actor = _actor(rounds, "<deliverable>done</deliverable>")
        return DualModelReasoner(thinker=thinker, actor=actor), Task(
            goal="g", tools=[NOOP], max_rounds=rounds
        )
    if kind == "mono":
        actor = _actor(rounds, "<deliverable>done</deliverable>")
        return MonoModelReasoner(actor), Task(goal="g", tools=[NOOP], max_rounds=rounds)
    model = _actor(rounds, "done")
    return ReActReasoner(model, max_steps=2 * rounds, function_calling="prompt"), Task(goal="g", tools=[NOOP])


def _seconds(kind: str, rounds: int, driver: str) -> tuple[float, float]:
    """The wall and CPU seconds of one job of ``rounds`` rounds."""
    reasoner, task = _reasoner(kind, rounds)
    wall, cpu = time.perf_counter(), time.process_time()
    outcome = reasoner.run(task) if driver == "run" else asyncio.run(reasoner.arun(task))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if outcome.status != "completed" or outcome.rounds != rounds:
        raise RuntimeError(f"{kind} {driver}: {outcome.status} after {outcome.rounds} rounds, not {rounds}")
    return wall, cpu


def per_round_us(kind: str, driver: str, repeats: int) -> tuple[float, float]:
    """Wall and CPU microseconds per round of ``kind`` driven by ``driver`` (``run`` or ``arun``)."""
    _seconds(kind, SHORT, driver)  # warm: imports, caches
    walls, cpus = [], []
    for _ in range(repeats):
        (long_wall, long_cpu), (short_wall, short_cpu) = (
            _seconds(kind, LONG, driver),
            _seconds(kind, SHORT, driver),
        )
        walls.append((long_wall - short_wall) / (LONG - SHORT) * 1e6)
        cpus.append((long_cpu - short_cpu) / (LONG - SHORT) * 1e6)
    return statistics.median(walls), statistics.median(cpus)


def main(argv: list[str] | None = None) -> int:
    """Print the CPU and wall microseconds per round of each kind and driver."""
    parser = argparse.ArgumentParser(prog="python -m bench.loop_cost", description=main.__doc__)
    parser.add_argument("--repeats", type=int, default=15, help="pairs of jobs per figure (median)")
    args = parser.parse_args(argv)
    for kind in ("dual", "mono", "react"):
        for driver in ("run", "arun"):
            wall, cpu = per_round_us(kind, driver, args.repeats)
            print(f"loop_cpu_us_per_round_{kind}_{driver}: {cpu:.1f}", flush=True)
            print(f"loop_us_per_round_{kind}_{driver}: {wall:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
