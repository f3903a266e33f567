"""Reasoning parsers: split a model's output into thinking, answer and in-band tool calls.

    parser = get_reasoning_parser("qwen3")
    split = parser.parse(text, thinking=True)        # split.reasoning, split.content, split.tool_calls
    stream = parser.stream(thinking=True)
    for chunk in chunks:
        delta = stream.feed(chunk)                    # new text only
    delta = stream.finish()                           # whatever was held back

``parse`` is the stream fed one chunk, so the two always agree. See ``registry`` for the names.
"""

from __future__ import annotations

from tandem.reasoner.parsing.base import (
    ParsedToolCall,
    ReasoningDelta,
    ReasoningParser,
    ReasoningSplit,
    ReasoningStream,
)
from tandem.reasoner.parsing.harmony import HarmonyParser
from tandem.reasoner.parsing.plain import PlainParser
from tandem.reasoner.parsing.registry import REASONING_PARSERS, get_reasoning_parser
from tandem.reasoner.parsing.think_tags import ThinkTagParser

__all__ = [
    "REASONING_PARSERS",
    "HarmonyParser",
    "ParsedToolCall",
    "PlainParser",
    "ReasoningDelta",
    "ReasoningParser",
    "ReasoningSplit",
    "ReasoningStream",
    "ThinkTagParser",
    "get_reasoning_parser",
]
