"""Redaction of large texts, and what it leaves other threads: ``python -m bench.redaction [--quick]``.

Issue 22: a tool that returned 50 MB had it redacted before it was cut, the redaction's regular
expressions held the GIL 13–36 s, and the worker's lease keeper thread could not renew a lease.
For each shape of text (50 MB; 12.5 MB with ``--quick``) it prints, one per line:

* ``redaction_<shape>_s``: seconds ``redact`` takes (best of the runs);
* ``redaction_<shape>_longest_pause_s``: the longest time a thread that wakes every 10 ms waited
  while ``redact`` ran: what a lease keeper in the same process would wait;

and, with 10,000 known secrets registered, ``redaction_10000_secrets_s`` and its pause (every secret
occurs once in the text); ``redaction_linearity_<shape>``: seconds for the whole text over 4 × the
seconds for a quarter of it (1.0 is linear; the redaction before issue 22 was quadratic on the
``hostile`` shape: 40 KB took 28 s); ``tool_output_s``: what ``ToolRunner`` spends on a call whose
output is the whole text (it cuts the output first, so this is independent of the size).

Shapes: ``logs`` (access-log lines with URLs, query strings and ids), ``json`` (a list of records),
``base64url`` (one long token-like run), ``hostile`` (``a-a-a-…`` runs, the worst case of the old
patterns, with a ``password=`` pair after each).
"""

from __future__ import annotations

import base64
import json
import random
import string
import sys
import threading
import time
from collections.abc import Callable

from tandem.reasoner.function_calling import ParsedFunctionCall
from tandem.reasoner.tool_runner import ToolRunner
from tandem.toolkit.redaction import SecretRegistry, redact
from tandem.toolkit.tool import Tool

MB = 1_000_000


def logs(size: int) -> str:
    line = "{:08d} GET /v1/items/item-{}-a-b-c?page=2&sig=ab12cd34 200 agent=curl/8 trace=4bf92f3577b3 ok\n"
    return "".join(line.format(i, i) for i in range(size // 80 + 1))[:size]


def records(size: int) -> str:
    row = {"name": "item", "token_count": 7, "url": "https://x.example/z?q=1"}
    return json.dumps([{"id": i, **row} for i in range(size // 75)])[:size]


def base64url(size: int) -> str:
    return base64.urlsafe_b64encode(random.Random(1).randbytes(size * 3 // 4 + 3)).decode()[:size]


def hostile(size: int) -> str:
    block = "a-" * 50_000 + " password=hunter22\n"
    return (block * (size // len(block) + 1))[:size]


SHAPES: dict[str, Callable[[int], str]] = {
    "logs": logs,
    "json": records,
    "base64url": base64url,
    "hostile": hostile,
}


def timed(work: Callable[[], object]) -> tuple[float, float]:
    """``(seconds work took, longest wait of a thread waking every 10 ms meanwhile)``."""
    waits: list[float] = []
    stop = threading.Event()

    def ticker() -> None:
        last = time.perf_counter()
        while not stop.wait(0.01):
            now = time.perf_counter()
            waits.append(now - last)
            last = now

    thread = threading.Thread(target=ticker, daemon=True)
    thread.start()
    started = time.perf_counter()
    work()
    took = time.perf_counter() - started
    stop.set()
    thread.join()
    return took, max(waits, default=took)


def best(work: Callable[[], object], repeats: int) -> tuple[float, float]:
    runs = [timed(work) for _ in range(repeats)]
    return min(r[0] for r in runs), max(r[1] for r in runs)


def run(quick: bool = False) -> dict[str, float]:
    """Measure every figure and print one ``name: value`` line per figure; return them by name."""
    size = 50 * MB // (4 if quick else 1)
    repeats = 1 if quick else 3
    figures: dict[str, float] = {}
    empty = SecretRegistry()
    for shape, build in SHAPES.items():
        text = build(size)
        quarter = text[: size // 4]
        seconds, pause = best(lambda text=text: redact(text, registry=empty), repeats)
        figures[f"redaction_{shape}_s"] = seconds
        figures[f"redaction_{shape}_longest_pause_s"] = pause
        small, _ = best(lambda quarter=quarter: redact(quarter, registry=empty), repeats)
        figures[f"redaction_linearity_{shape}"] = seconds / (4 * small)

    rnd = random.Random(22)
    alphabet = string.ascii_letters + string.digits
    known = ["sk-" + "".join(rnd.choices(alphabet, k=rnd.randint(12, 40))) for _ in range(10_000)]
    registry = SecretRegistry()
    for secret in known:
        registry.add(secret)
    filler = logs(size)
    step = size // len(known)
    text = "".join(filler[i * step : (i + 1) * step] + secret for i, secret in enumerate(known))
    seconds, pause = best(lambda: redact(text, registry=registry), repeats)
    figures["redaction_10000_secrets_s"] = seconds
    figures["redaction_10000_secrets_longest_pause_s"] = pause

    def dump() -> str:
        """Return the whole log."""
        return filler

    tool = Tool.from_function(dump)
    runner = ToolRunner()
    call = ParsedFunctionCall(name="dump", call_objective="", args={})
    figures["tool_output_s"], _ = best(lambda: runner.run_call({"dump": tool}, call, 1), repeats)
    for name, value in figures.items():
        print(f"{name}: {value:.3f}")
    return figures


if __name__ == "__main__":
    run(quick="--quick" in sys.argv[1:])
