"""Reasoning-parser throughput: ``python -m bench.parsers [--quick]``.

For each format family (think tags, measured with ``qwen3``; Harmony, with ``gpt-oss``, in its
token form and in the stripped form a host that drops special tokens sends) it builds about 1 MB
of realistic output: a long reasoning section with prose, code and stray ``<`` characters, then an
answer (Harmony adds a preamble and a tool call). It prints, one per line:

* ``parser_<family>_<feed>_mb_per_s``: throughput when the output is fed in one chunk
  (``whole``) and in chunks of 1, 4 and 16 characters (``chunk1``, ``chunk4``, ``chunk16``);
* ``parser_<family>_chunk4_cost_ratio``: time with 4-character chunks / time with one chunk;
* ``parser_<family>_chunk4_vs_none_ratio``: time with 4-character chunks / time of the ``none``
  parser fed the same chunks. ``none`` does only what every stream must (one call and one
  :class:`~tandem.reasoner.parsing.ReasoningDelta` per chunk), so this is the parser's own overhead
  on top of the per-chunk cost of the streaming interface itself.

Chunks are cut before the clock starts; each figure is the best of several runs. For the ``vs_none``
ratio the parser and ``none`` alternate run by run (the machine is shared and noisy: a busy spell
then slows both alike instead of only one of them).

The cost ratio has a floor that no parser behind this interface can go under in CPython: one
chunk costs a few C-level ``str.find`` calls (about a millisecond per MB), while 4-character
chunks cost 250,000 Python calls per MB, each returning a fresh delta (0.1 to 0.2 µs apiece even
for ``none``). The ``vs_none`` ratio isolates what the parser itself adds to that.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from tandem.reasoner.parsing import ReasoningSplit, get_reasoning_parser

FAMILIES = {"think_tags": "qwen3", "harmony": "gpt-oss", "harmony_stripped": "gpt-oss"}
"""Family name in the figures → the parser that stands for it."""

CHUNK_SIZES = (1, 4, 16)

_REASONING_PARAGRAPH = (
    "Let me work through this step by step. The user wants the total cost, so first I need the\n"
    "unit price and the quantity. If qty < 10 there is no discount; otherwise the rate drops by\n"
    "5%. In code that would be `price * qty if qty < 10 else price * qty * 0.95`, and for the\n"
    "edge case a<b<c I should check the bounds again. Wait, the table header says <b>Total</b>,\n"
    "which is HTML, not a tag I need to care about. So the answer is 42 units at 3.50 each.\n\n"
)
_CONTENT_PARAGRAPH = (
    "## Result\n\nThe total is **139.65** (42 × 3.50 with the 5% discount).\n\n```python\n"
    "def total(price: float, qty: int) -> float:\n    return price * qty * (0.95 if qty >= 10 else 1)\n"
    "```\n\nFor quantities < 10 no discount applies.\n\n"
)


def _repeat(paragraph: str, size: int) -> str:
    return paragraph * max(1, size // len(paragraph))


def think_tags_output(size: int = 1_000_000) -> str:
    """About ``size`` characters of a Qwen3-style reply: 70% reasoning, then the answer."""
    reasoning = _repeat(_REASONING_PARAGRAPH, size * 7 // 10)
    content = _repeat(_CONTENT_PARAGRAPH, size * 3 // 10)
    return f"<think>\n{reasoning}</think>\n\n{content}"


def harmony_output(size: int = 1_000_000) -> str:
    """About ``size`` characters of a gpt-oss reply: analysis, a tool call, analysis, a final answer."""
    reasoning = _repeat(_REASONING_PARAGRAPH, size * 35 // 100)
    content = _repeat(_CONTENT_PARAGRAPH, size * 3 // 10)
    return (
        f"<|channel|>analysis<|message|>{reasoning}<|end|>"
        "<|start|>assistant<|channel|>commentary<|message|>Let me look up the price.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.lookup_price <|constrain|>json"
        '<|message|>{"item": "widget", "currency": "EUR"}<|call|>'
        f"<|start|>assistant<|channel|>analysis<|message|>{reasoning}<|end|>"
        f"<|start|>assistant<|channel|>final<|message|>{content}<|return|>"
    )


def harmony_stripped_output(size: int = 1_000_000) -> str:
    """:func:`harmony_output` as a host that skips special tokens sends it (``analysis…assistantfinal…``)."""
    reasoning = _repeat(_REASONING_PARAGRAPH, size * 35 // 100)
    content = _repeat(_CONTENT_PARAGRAPH, size * 3 // 10)
    return (
        f"analysis{reasoning}"
        "assistantcommentaryLet me look up the price."
        'assistantcommentary to=functions.lookup_price json{"item": "widget", "currency": "EUR"}'
        f"assistantanalysis{reasoning}"
        f"assistantfinal{content}"
    )


def _feed_seconds(parser_name: str, chunks: list[str], repeats: int) -> float:
    parser = get_reasoning_parser(parser_name)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        stream = parser.stream()
        feed = stream.feed
        for chunk in chunks:
            feed(chunk)
        stream.finish()
        best = min(best, time.perf_counter() - started)
    return best


def _alternating_seconds(parser_names: tuple[str, ...], chunks: list[str], repeats: int) -> list[float]:
    """The best time of each parser over ``chunks``, their runs interleaved (A, B, A, B, …)."""
    best = [float("inf")] * len(parser_names)
    for _ in range(repeats):
        for i, name in enumerate(parser_names):
            best[i] = min(best[i], _feed_seconds(name, chunks, 1))
    return best


def _check(parser_name: str, text: str, chunks: list[str]) -> None:
    """Refuse to report figures for a parser whose streamed result differs from ``parse``."""
    parser = get_reasoning_parser(parser_name)
    stream = parser.stream()
    deltas = [stream.feed(chunk) for chunk in chunks] + [stream.finish()]
    streamed = ReasoningSplit(
        "".join(d.reasoning for d in deltas),
        "".join(d.content for d in deltas),
        [call for d in deltas for call in d.tool_calls],
    )
    if streamed != parser.parse(text):
        width = len(chunks[0])
        raise AssertionError(f"{parser_name}: streaming in {width}-character chunks differs from parse")


def run(quick: bool = False) -> dict[str, float]:
    """Measure every figure and print one ``name: value`` line per figure; return them by name.

    ``quick`` uses a quarter of the output and fewer repeats (for smoke runs and CI).
    """
    size = 250_000 if quick else 1_000_000
    repeats = 2 if quick else 5
    builders: dict[str, Callable[[int], str]] = {
        "think_tags": think_tags_output,
        "harmony": harmony_output,
        "harmony_stripped": harmony_stripped_output,
    }
    figures: dict[str, float] = {}
    for family, parser_name in FAMILIES.items():
        text = builders[family](size)
        megabytes = len(text.encode()) / 1e6
        whole = _feed_seconds(parser_name, [text], repeats)
        figures[f"parser_{family}_whole_mb_per_s"] = megabytes / whole
        timings: dict[int, float] = {}
        baseline = 0.0
        for width in CHUNK_SIZES:
            chunks = [text[i : i + width] for i in range(0, len(text), width)]
            _check(parser_name, text, chunks)
            if width == 4:
                timings[width], baseline = _alternating_seconds((parser_name, "none"), chunks, repeats)
            else:
                timings[width] = _feed_seconds(parser_name, chunks, repeats)
            figures[f"parser_{family}_chunk{width}_mb_per_s"] = megabytes / timings[width]
        figures[f"parser_{family}_chunk4_cost_ratio"] = timings[4] / whole
        figures[f"parser_{family}_chunk4_vs_none_ratio"] = timings[4] / baseline
    for name, value in figures.items():
        print(f"{name}: {value:.2f}")
    return figures


if __name__ == "__main__":
    run(quick="--quick" in sys.argv[1:])
