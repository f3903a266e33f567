"""What redaction costs a step, before and after per-job scopes: ``python -m bench.redaction_scopes``.

Issue 25, item 3. Before, every job's unsealed secrets went into the one process-wide registry
(at most 10,000 values, the oldest dropped first). A worker that had run 313 jobs of 32 secrets
held 10,000 values; each new job's secrets changed the registry, so the next text redacted
rebuilt the whole index, and the operator's oldest credentials had been dropped. After, the
process registry holds only the operator's pinned credentials, and a job's secrets are its own
``SecretScope``, indexed once per job in the worker and entered by its steps.

Prints one ``name: value`` line per figure (milliseconds, median of ``--runs``):

* ``before_first_step_of_a_job_ms``: 10,000 values registered, a new job's 32 secrets registered,
  then one step's texts redacted (the index of 10,000 rebuilt): what the first step of each job cost;
* ``before_later_step_ms``: the same registry, nothing new registered (the index kept);
* ``after_first_step_of_a_job_ms``: 8 pinned operator credentials, the job's scope of 32 built
  and entered, the step's texts redacted;
* ``after_later_step_ms``: the scope already built (``JobFixtures`` keeps it);
* ``before_operator_key_masked`` / ``after_operator_key_masked``: whether the operator's first
  credential is still masked after those 313 jobs (``False`` before: it was dropped).

A step's texts: a 4,000-character tool output (the default ``TANDEM_MAX_OUTPUT_CHARS`` cut), the
call's args and objective, and the ``tool_result`` event's JSON.
"""

from __future__ import annotations

import argparse
import contextvars
import json
import random
import statistics
import string
import time
from collections.abc import Callable

from tandem.toolkit.redaction import SecretRegistry, SecretScope, enter_scope, redact, redact_data

OPERATOR = [f"operator-credential-{i}-" + "k" * 20 for i in range(8)]


def _secrets(rng: random.Random, n: int) -> list[str]:
    alphabet = string.ascii_letters + string.digits
    return ["".join(rng.choice(alphabet) for _ in range(24)) for _ in range(n)]


def step_texts(rng: random.Random) -> tuple[str, dict[str, object], str]:
    words = ["result", "row", "id", "value", "ok", "GET", "/v1/items", "200", "sum", "total"]
    output = " ".join(rng.choice(words) + str(rng.randrange(1000)) for _ in range(700))[:4000]
    args = {"query": "select * from items where id = 7", "limit": 50}
    event = json.dumps({"index": 1, "name": "search", "status": "succeeded", "output": output})
    return output, args, event


def redact_step(registry: SecretRegistry, texts: tuple[str, dict[str, object], str]) -> None:
    output, args, event = texts
    redact(output, registry=registry)
    redact_data(args, registry=registry)
    redact(event, registry=registry)


def timed(fn: Callable[[], None], runs: int) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def before(runs: int, rng: random.Random) -> dict[str, float | bool]:
    registry = SecretRegistry(capacity=10_000)
    registry._values = {}  # the old registry: bounded, oldest dropped first (emulated below)
    kept: list[str] = []

    def register(values: list[str]) -> None:
        kept.extend(values)
        del kept[:-10_000]
        registry._values = dict.fromkeys(kept)
        registry._index = None

    register(OPERATOR)
    for _ in range(313):
        register(_secrets(rng, 32))
    texts = step_texts(rng)
    jobs = [_secrets(rng, 32) for _ in range(runs)]

    def first_step() -> None:
        register(jobs.pop())
        redact_step(registry, texts)

    first = timed(first_step, runs)
    later = timed(lambda: redact_step(registry, texts), runs)
    masked = redact(f"key {OPERATOR[0]}", registry=registry) != f"key {OPERATOR[0]}"
    return {
        "before_first_step_of_a_job_ms": first,
        "before_later_step_ms": later,
        "before_operator_key_masked": masked,
    }


def after(runs: int, rng: random.Random) -> dict[str, float | bool]:
    registry = SecretRegistry()
    for value in OPERATOR:
        registry.add(value)
    texts = step_texts(rng)
    for job in range(313):  # jobs that ran before: their scopes came and went
        contextvars.copy_context().run(enter_scope, SecretScope.of(f"j{job}", _secrets(rng, 32)))
    jobs = [_secrets(rng, 32) for _ in range(runs)]
    built = SecretScope.of("kept", _secrets(rng, 32))

    def first_step() -> None:
        def run() -> None:
            enter_scope(SecretScope.of("new", jobs.pop()))
            redact_step(registry, texts)

        contextvars.copy_context().run(run)

    def later_step() -> None:
        def run() -> None:
            enter_scope(built)
            redact_step(registry, texts)

        contextvars.copy_context().run(run)

    first = timed(first_step, runs)
    later = timed(later_step, runs)
    masked = redact(f"key {OPERATOR[0]}", registry=registry) != f"key {OPERATOR[0]}"
    return {
        "after_first_step_of_a_job_ms": first,
        "after_later_step_ms": later,
        "after_operator_key_masked": masked,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=30)
    runs = parser.parse_args().runs
    figures = {**before(runs, random.Random(1)), **after(runs, random.Random(2))}
    for name, value in figures.items():
        print(f"{name}: {value:.3f}" if isinstance(value, float) else f"{name}: {value}")


if __name__ == "__main__":
    main()
