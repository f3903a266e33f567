"""Table tests for the think-tag formats: each case is checked parsed whole and streamed in pieces."""

from __future__ import annotations

import pytest

from tandem.reasoner.errors import ConfigurationError
from tandem.reasoner.parsing import ReasoningSplit, ThinkTagParser, get_reasoning_parser
from tests.reasoner.parsing.chunking import chunkings, feed_all

QWEN_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
GLM_CALL = "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>"
K2_CALLS = (
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>'
)

CASES = [
    # deepseek-r1: the template already wrote <think>, so output starts inside reasoning.
    pytest.param(
        "deepseek-r1", None, "I think.</think>Answer", "I think.", "Answer", id="r1-start-tag-absent"
    ),
    pytest.param(
        "deepseek-r1", None, "<think>I think.</think>Answer", "I think.", "Answer", id="r1-start-tag-consumed"
    ),
    pytest.param("deepseek-r1", None, "still thinking", "still thinking", "", id="r1-end-tag-never-arrives"),
    pytest.param("deepseek-r1", None, "thinking</thi", "thinking</thi", "", id="r1-truncated-inside-end-tag"),
    pytest.param("deepseek-r1", True, "x</think>y", "x", "y", id="r1-thinking-true"),
    pytest.param(
        "deepseek-r1", False, "<think>x</think>y", "", "<think>x</think>y", id="r1-thinking-false-left-as-is"
    ),
    pytest.param("deepseek-r1", False, "x</think>y", "", "x</think>y", id="r1-thinking-false-no-start-tag"),
    pytest.param("deepseek-r1", None, "</think>Answer", "", "Answer", id="r1-empty-reasoning"),
    pytest.param(
        "deepseek-r1", None, "\n <think>x</think>y", "x", "y", id="r1-whitespace-before-start-tag-dropped"
    ),
    pytest.param(
        "deepseek-r1", None, "\n x</think>y", "\n x", "y", id="r1-leading-whitespace-kept-without-tag"
    ),
    pytest.param(
        "deepseek-r1", None, "<think>a<think>b</think>c", "a<think>b", "c", id="r1-second-start-tag-is-text"
    ),
    pytest.param(
        "deepseek-r1", None, "a</think>b</think>c", "a", "b</think>c", id="r1-later-end-tag-is-content"
    ),
    pytest.param("deepseek-r1", None, "", "", "", id="r1-empty-output"),
    pytest.param("deepseek-r1", None, " \n", " \n", "", id="r1-whitespace-only-is-reasoning"),
    pytest.param(
        "deepseek-r1", None, "<think>\nx\n</think>\n\ny", "\nx\n", "\n\ny", id="r1-whitespace-inside-kept"
    ),
    pytest.param(
        "deepseek-r1", None, "a<tool_call>b", "a<tool_call>b", "", id="r1-tool-call-tag-does-not-interrupt"
    ),
    pytest.param(
        "deepseek-r1", None, "a</thinking>b</think>c", "a</thinking>b", "c", id="r1-lookalike-end-tag"
    ),
    pytest.param(
        "deepseek-r1", None, "1 < 2 <3 <</think>ok", "1 < 2 <3 <", "ok", id="r1-angle-brackets-in-reasoning"
    ),
    pytest.param("deepseek-r1", None, "<thinker>x</think>y", "<thinker>x", "y", id="r1-lookalike-start-tag"),
    # deepseek-v3: thinks only when asked.
    pytest.param("deepseek-v3", None, "Answer", "", "Answer", id="v3-none-no-tag-is-content"),
    pytest.param("deepseek-v3", None, "<think>x</think>y", "x", "y", id="v3-none-start-tag-opens-reasoning"),
    pytest.param("deepseek-v3", True, "x</think>y", "x", "y", id="v3-thinking-true-start-tag-absent"),
    pytest.param("deepseek-v3", True, "<think>abc", "abc", "", id="v3-thinking-true-truncated"),
    pytest.param("deepseek-v3", False, "<think>x</think>y", "", "<think>x</think>y", id="v3-thinking-false"),
    pytest.param("deepseek-v3", None, "x</think>y", "", "x</think>y", id="v3-none-lone-end-tag-is-content"),
    pytest.param(
        "deepseek-v3",
        None,
        "Hi <think>x</think>",
        "",
        "Hi <think>x</think>",
        id="v3-late-start-tag-is-content",
    ),
    # qwen3: <think> at the start when enable_thinking; a tool call may cut reasoning short.
    pytest.param(
        "qwen3", None, "<think>\nplan\n</think>\n\nAnswer", "\nplan\n", "\n\nAnswer", id="qwen3-standard"
    ),
    pytest.param("qwen3", None, "Answer", "", "Answer", id="qwen3-none-no-tag"),
    pytest.param(
        "qwen3", True, "plan</think>Answer", "plan", "Answer", id="qwen3-thinking-true-start-tag-absent"
    ),
    pytest.param(
        "qwen3", True, "<think>plan</think>Answer", "plan", "Answer", id="qwen3-thinking-true-start-tag"
    ),
    pytest.param(
        "qwen3", None, f"<think>plan{QWEN_CALL}", "plan", QWEN_CALL, id="qwen3-tool-call-ends-reasoning"
    ),
    pytest.param(
        "qwen3",
        True,
        f"plan\n{QWEN_CALL}",
        "plan\n",
        QWEN_CALL,
        id="qwen3-thinking-true-tool-call-ends-reasoning",
    ),
    pytest.param(
        "qwen3",
        None,
        f"<think>a</think>b{QWEN_CALL}",
        "a",
        f"b{QWEN_CALL}",
        id="qwen3-tool-call-after-reasoning",
    ),
    pytest.param("qwen3", True, QWEN_CALL, "", QWEN_CALL, id="qwen3-starts-with-tool-call"),
    pytest.param(
        "qwen3",
        False,
        "<think>\n\n</think>\n\nAnswer",
        "",
        "<think>\n\n</think>\n\nAnswer",
        id="qwen3-thinking-false-empty-block-left",
    ),
    pytest.param("qwen3", False, QWEN_CALL, "", QWEN_CALL, id="qwen3-thinking-false-tool-call"),
    pytest.param("qwen3", None, "<think>abc", "abc", "", id="qwen3-end-tag-never-arrives"),
    pytest.param(
        "qwen3", None, "<think>abc<tool_ca", "abc<tool_ca", "", id="qwen3-truncated-inside-tool-tag"
    ),
    pytest.param(
        "qwen3", None, "<think>a<tool_calls>b</think>c", "a<tool_calls>b", "c", id="qwen3-lookalike-tool-tag"
    ),
    pytest.param(
        "qwen3", None, "<think>a</think><tool_call>b", "a", "<tool_call>b", id="qwen3-end-tag-then-tool-call"
    ),
    # glm45: the same tags and the same tool-call interruption.
    pytest.param("glm45", None, "<think>a</think>b", "a", "b", id="glm45-standard"),
    pytest.param(
        "glm45",
        None,
        f"<think>I should call it.{GLM_CALL}",
        "I should call it.",
        GLM_CALL,
        id="glm45-tool-call-ends-reasoning",
    ),
    pytest.param("glm45", None, "plain answer", "", "plain answer", id="glm45-none-no-tag"),
    pytest.param("glm45", True, "a</think>b", "a", "b", id="glm45-thinking-true-start-tag-absent"),
    pytest.param("glm45", False, "<think>a</think>b", "", "<think>a</think>b", id="glm45-thinking-false"),
    pytest.param("glm45", None, "<think>a", "a", "", id="glm45-end-tag-never-arrives"),
    # kimi: its own pair of delimiters.
    pytest.param("kimi", None, "◁think▷a◁/think▷b", "a", "b", id="kimi-standard"),
    pytest.param("kimi", None, "plain", "", "plain", id="kimi-none-no-tag"),
    pytest.param("kimi", True, "a◁/think▷b", "a", "b", id="kimi-thinking-true-start-tag-absent"),
    pytest.param("kimi", None, "<think>a</think>b", "", "<think>a</think>b", id="kimi-angle-tags-are-text"),
    pytest.param("kimi", None, "◁think▷abc", "abc", "", id="kimi-end-tag-never-arrives"),
    pytest.param("kimi", None, "◁think▷a◁/thi", "a◁/thi", "", id="kimi-truncated-inside-end-tag"),
    pytest.param("kimi", False, "◁think▷a◁/think▷b", "", "◁think▷a◁/think▷b", id="kimi-thinking-false"),
    pytest.param("kimi", None, "◁think▷a ◁ b▷◁/think▷c", "a ◁ b▷", "c", id="kimi-lone-delimiter-chars"),
    pytest.param("qwen3", None, "<think><think>a</think>b", "a", "b", id="repeated-start-tag-dropped"),
    pytest.param("kimi", None, "◁think▷◁think▷a◁/think▷b", "a", "b", id="kimi-repeated-start-tag-dropped"),
    pytest.param(
        "qwen3", None, "<think> <think>a</think>b", " <think>a", "b", id="start-tag-after-space-is-reasoning"
    ),
    pytest.param("qwen3", None, "<think><thin", "<thin", "", id="truncated-inside-repeated-start-tag"),
    # kimi-k2: <think> tags; its tool-call section may open before </think>.
    pytest.param("kimi-k2", None, "<think>a</think>b", "a", "b", id="k2-standard"),
    pytest.param("kimi-k2", None, f"<think>a{K2_CALLS}", "a", K2_CALLS, id="k2-tool-section-ends-reasoning"),
    pytest.param(
        "kimi-k2",
        None,
        f"<think>a</think>b{K2_CALLS}",
        "a",
        f"b{K2_CALLS}",
        id="k2-tool-section-after-reasoning",
    ),
    pytest.param("kimi-k2", None, "answer", "answer", "", id="k2-none-starts-in-reasoning"),
    pytest.param("kimi-k2", False, "answer", "", "answer", id="k2-thinking-false-no-tag"),
    pytest.param("kimi-k2", True, "a</think>b", "a", "b", id="k2-thinking-true-start-tag-absent"),
    pytest.param("kimi-k2", False, "<think>a</think>b", "", "<think>a</think>b", id="k2-thinking-false"),
    pytest.param(
        "kimi-k2", None, "<think>a<tool_call>b</think>c", "a<tool_call>b", "c", id="k2-qwen-tool-tag-is-text"
    ),
    pytest.param(
        "kimi-k2",
        None,
        "<think>a<|tool_calls_sec",
        "a<|tool_calls_sec",
        "",
        id="k2-truncated-inside-section-tag",
    ),
    # think: the generic default of the model service.
    pytest.param("think", None, "<think>a</think>b", "a", "b", id="think-start-tag"),
    pytest.param("think", None, "Just an answer.", "", "Just an answer.", id="think-no-tag-is-content"),
    pytest.param("think", True, "a</think>b", "a", "b", id="think-thinking-true-start-tag-absent"),
    pytest.param("think", False, "<think>a</think>b", "", "<think>a</think>b", id="think-thinking-false"),
    pytest.param(
        "think",
        None,
        "Answer <think>x</think>",
        "",
        "Answer <think>x</think>",
        id="think-late-tag-is-content",
    ),
    pytest.param("think", None, "<think>abc", "abc", "", id="think-end-tag-never-arrives"),
    pytest.param("think", None, "  ", "", "  ", id="think-whitespace-only-is-content"),
    pytest.param("think", None, "<thi", "", "<thi", id="think-partial-start-tag-at-end-is-content"),
    pytest.param("think", True, "<thi", "<thi", "", id="think-partial-start-tag-thinking-true"),
    pytest.param("think", None, "<think>思考 ✓</think>答案", "思考 ✓", "答案", id="think-non-ascii"),
    pytest.param("think", None, "<think></think>x", "", "x", id="think-empty-block"),
    pytest.param(
        "think", None, f"<think>a{QWEN_CALL}", f"a{QWEN_CALL}", "", id="think-tool-call-does-not-interrupt"
    ),
    pytest.param(
        "think", None, "<<think>a</think>", "", "<<think>a</think>", id="think-doubled-bracket-is-content"
    ),
    pytest.param(
        "think", None, "<think>a</think></think>", "a", "</think>", id="think-second-end-tag-is-content"
    ),
    # none: no reasoning, ever.
    pytest.param("none", None, "<think>a</think>b", "", "<think>a</think>b", id="none-tags-are-content"),
    pytest.param("none", True, "a</think>b", "", "a</think>b", id="none-thinking-true-still-content"),
    pytest.param(
        "none",
        None,
        "<|channel|>analysis<|message|>a<|end|>",
        "",
        "<|channel|>analysis<|message|>a<|end|>",
        id="none-harmony-tokens-are-content",
    ),
    pytest.param("none", False, "", "", "", id="none-empty"),
]


@pytest.mark.parametrize(("name", "thinking", "text", "reasoning", "content"), CASES)
def test_parse(name: str, thinking: bool | None, text: str, reasoning: str, content: str) -> None:
    split = get_reasoning_parser(name).parse(text, thinking)
    assert split == ReasoningSplit(reasoning, content, [])


@pytest.mark.parametrize(("name", "thinking", "text", "reasoning", "content"), CASES)
def test_stream_in_any_chunking(
    name: str, thinking: bool | None, text: str, reasoning: str, content: str
) -> None:
    parser = get_reasoning_parser(name)
    for chunks in chunkings(text):
        assert feed_all(parser, chunks, thinking) == ReasoningSplit(reasoning, content, []), chunks


def test_split_end_tag_is_held_then_released() -> None:
    stream = get_reasoning_parser("deepseek-r1").stream()
    assert stream.feed("abc</th") == ("abc", "", ())
    assert stream.feed("ink>x") == ("", "x", ())
    assert stream.finish() == ("", "", ())


def test_false_alarm_is_released_as_soon_as_it_is_decided() -> None:
    stream = get_reasoning_parser("qwen3").stream(True)
    assert stream.feed("a<tool") == ("a", "", ())
    assert stream.feed("s") == ("<tools", "", ())


def test_split_start_tag_is_held_while_it_may_still_match() -> None:
    stream = get_reasoning_parser("qwen3").stream()
    assert stream.feed(" <th") == ("", "", ())
    assert stream.feed("ink>plan") == ("plan", "", ())
    assert stream.feed("</think>answer") == ("", "answer", ())


def test_holdback_never_exceeds_a_tag() -> None:
    # Brackets that never complete a tag must not pile up: release lags by less than a tag.
    parser = get_reasoning_parser("kimi-k2")
    stream = parser.stream(True)
    released = 0
    longest = len("<|tool_calls_section_begin|>")
    for fed, char in enumerate("<|tool_calls_section_<</thin<tool_cal" * 50, start=1):
        delta = stream.feed(char)
        released += len(delta.reasoning) + len(delta.content)
        assert fed - released < longest


def test_feed_after_finish_is_refused() -> None:
    stream = get_reasoning_parser("think").stream()
    stream.feed("x")
    stream.finish()
    with pytest.raises(ValueError, match="after finish"):
        stream.feed("y")
    with pytest.raises(ValueError, match="already finished"):
        stream.finish()


def test_streams_are_independent() -> None:
    parser = get_reasoning_parser("deepseek-r1")
    first, second = parser.stream(), parser.stream(False)
    assert first.feed("a</think>b") == ("a", "b", ())
    assert second.feed("a</think>b") == ("", "a</think>b", ())


def test_tags_must_share_their_first_character() -> None:
    with pytest.raises(ConfigurationError, match="first character"):
        ThinkTagParser("odd", start_tag="[think]", end_tag="</think>")
