"""Property: any chunking of any text streams to exactly what ``parse`` returns, for every parser."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tandem.reasoner.parsing import REASONING_PARSERS, get_reasoning_parser
from tandem.reasoner.parsing.think_tags import ThinkTagParser
from tests.reasoner.parsing.chunking import feed_all, split_at

FRAGMENTS = [
    "<", "/", ">", "think", "<think>", "</think>", "<thi", "</th", "nk>",
    "◁", "▷", "◁think▷", "◁/think▷", "/think",
    "<|", "|>", "<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>",
    "<|constrain|>", "<|en", "channel", "analysis", "final", "commentary", "message", "end",
    " to=functions.f", "assistant", "json", "<tool_call>", "<tool_", "tool_call",
    "<|tool_calls_section_begin|>", "a", "b", "x y", " ", "\n", "{}",
    # gpt-oss with its special tokens stripped by the host
    "assistantfinal", "assistantanalysis", "assistantcommentary", "assis", "assistant", "to=", " json",
    "to=functions.g", "=", "<think><think>", "ANALYSIS", "AssistantFinal",
]  # fmt: skip

texts = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=3)), max_size=25).map("".join)


@pytest.mark.parametrize(
    "thinking", [None, True, False], ids=["thinking-none", "thinking-true", "thinking-false"]
)
@pytest.mark.parametrize("name", REASONING_PARSERS)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_chunking_gives_parse(name: str, thinking: bool | None, data: st.DataObject) -> None:
    parser = get_reasoning_parser(name)
    text = data.draw(texts, label="text")
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=12), label="cuts")
    whole = parser.parse(text, thinking)
    assert feed_all(parser, split_at(text, cuts), thinking) == whole
    assert feed_all(parser, list(text), thinking) == whole
    if thinking is False:
        assert whole.reasoning == ""
    if isinstance(parser, ThinkTagParser):
        # Tag formats only remove tags: the content is always the tail of the output.
        assert text.endswith(whole.content)
        assert not whole.tool_calls
