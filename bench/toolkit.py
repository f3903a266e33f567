"""Benchmark: recommendation on a large random toolkit.

``python -m bench.toolkit [--quick]`` builds a seeded random toolkit of 10,000 actions with
50,000 ``next`` edges and 2,000 tools (two ``call`` edges per action), then times
``recommend_subgraph(3 random actions, threshold=0.5, hops=3)``. It prints
``toolkit_recommend_ms`` (the median; the goal is under 50 ms) and the build time.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from tandem.toolkit import Action, Tool, Toolkit, ToolkitService

ACTIONS = 10_000
NEXT_EDGES = 50_000
TOOLS = 2_000
CALLS_PER_ACTION = 2
SEED = 20240601
GOAL_MS = 50.0


def _noop(x: int = 0) -> int:
    """Return ``x``."""
    return x


def build(seed: int = SEED) -> Toolkit:
    """The random toolkit, the same for the same seed (edges added straight, scores in [0, 1])."""
    rng = random.Random(seed)
    graph = Toolkit()
    action_ids = [f"a{i}" for i in range(ACTIONS)]
    for aid in action_ids:
        graph.add_vertex(aid, data=Action(aid, aid, f"step {aid}"))
    tool_ids = [f"t{i}" for i in range(TOOLS)]
    for tid in tool_ids:
        graph.add_vertex(tid, data=Tool(tid, f"tool {tid}", _noop, schema={"type": "object"}))
    pairs: set[tuple[int, int]] = set()
    while len(pairs) < NEXT_EDGES:
        u, v = rng.randrange(ACTIONS), rng.randrange(ACTIONS)
        if u != v:
            pairs.add((u, v))
    for u, v in sorted(pairs):
        graph.add_edge(action_ids[u], action_ids[v], round(rng.random(), 3))
    for aid in action_ids:
        for tid in rng.sample(tool_ids, CALLS_PER_ACTION):
            graph.add_edge(aid, tid, round(rng.random(), 3))
    return graph


def run(quick: bool = False) -> dict[str, float]:
    """Build the toolkit and time recommendation; returns the figures printed by ``main``."""
    started = time.perf_counter()
    graph = build()
    build_s = time.perf_counter() - started
    service = ToolkitService(graph)
    rng = random.Random(SEED + 1)
    rounds = 15 if quick else 101
    timings: list[float] = []
    reached: list[int] = []
    for _ in range(rounds):
        starts = [f"a{rng.randrange(ACTIONS)}" for _ in range(3)]
        t0 = time.perf_counter()
        sub = service.recommend_subgraph(starts, threshold=0.5, hops=3)
        timings.append((time.perf_counter() - t0) * 1000.0)
        reached.append(len(sub))
    return {
        "toolkit_recommend_ms": statistics.median(timings),
        "toolkit_recommend_max_ms": max(timings),
        "toolkit_recommend_vertices": statistics.median(reached),
        "toolkit_build_s": build_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer timing rounds")
    figures = run(quick=parser.parse_args().quick)
    for key, value in figures.items():
        print(f"{key}: {value:.3f}")
    verdict = "ok" if figures["toolkit_recommend_ms"] < GOAL_MS else "SLOW"
    print(f"goal: toolkit_recommend_ms < {GOAL_MS:g} ({verdict})")


if __name__ == "__main__":
    main()
