"""Cost grows linearly with the output, even fed one character at a time through tricky text."""

from __future__ import annotations

import time

import pytest

from reasoner.parsing import get_reasoning_parser

# Each piece keeps the parser busy: partial tags to hold back, then release.
TRICKY = {
    "qwen3": "<think>" + "a <b <thin </thi <tool_ca x\n" * 4000,
    "kimi": "◁think▷" + "a ◁ ◁/thin ▷ x\n" * 4000,
    "gpt-oss": (
        "<|channel|>analysis<|message|>"
        + "a <| <|en <|star x\n" * 2000
        + "<|end|><|start|>assistant<|channel|>commentary to=functions.f<|message|>"
        + '{"a": "<|x <| <"}' * 2000
    ),
}


def _seconds_one_char_at_a_time(name: str, text: str) -> float:
    parser = get_reasoning_parser(name)
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        stream = parser.stream()
        for char in text:
            stream.feed(char)
        stream.finish()
        best = min(best, time.perf_counter() - started)
    return best


@pytest.mark.parametrize("name", sorted(TRICKY))
def test_four_times_the_text_costs_about_four_times_as_much(name: str) -> None:
    text = TRICKY[name]
    small = _seconds_one_char_at_a_time(name, text[: len(text) // 4])
    large = _seconds_one_char_at_a_time(name, text)
    # Linear gives about 4; rescanning from the start would give about 16. Generous for noisy CI.
    assert large / small < 8
