"""Helpers shared by the parser tests: feed a text in given pieces and add the deltas up."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from tandem.reasoner.parsing import ParsedToolCall, ReasoningParser, ReasoningSplit


def feed_all(parser: ReasoningParser, chunks: Iterable[str], thinking: bool | None) -> ReasoningSplit:
    """Stream ``chunks`` through a fresh stream and concatenate every delta, ``finish`` included."""
    stream = parser.stream(thinking)
    reasoning: list[str] = []
    content: list[str] = []
    calls: list[ParsedToolCall] = []
    for delta in [*(stream.feed(chunk) for chunk in chunks), stream.finish()]:
        reasoning.append(delta.reasoning)
        content.append(delta.content)
        calls.extend(delta.tool_calls)
    return ReasoningSplit("".join(reasoning), "".join(content), calls)


def split_at(text: str, cuts: Iterable[int]) -> list[str]:
    """Cut ``text`` at the given offsets (sorted, duplicates allowed: they make empty chunks)."""
    pieces = []
    start = 0
    for cut in sorted(cuts):
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return pieces


def chunkings(text: str) -> Iterator[list[str]]:
    """Every one-cut split of ``text``, one character per chunk, and one empty chunk in front."""
    for cut in range(len(text) + 1):
        yield split_at(text, [cut])
    yield list(text)
    yield ["", text, ""]
