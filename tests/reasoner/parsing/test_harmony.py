"""Table tests for the Harmony (gpt-oss) parser, parsed whole and streamed in every chunking."""

from __future__ import annotations

import pytest

from tandem.reasoner.parsing import ParsedToolCall, ReasoningSplit, get_reasoning_parser
from tandem.reasoner.parsing import harmony_reader as reader
from tandem.reasoner.parsing.harmony_format import HEADER_LIMIT, WHITE_SPACE, read_header
from tests.reasoner.parsing.chunking import chunkings, feed_all

ANALYSIS = "<|channel|>analysis<|message|>Think.<|end|>"
FINAL = "<|start|>assistant<|channel|>final<|message|>Answer.<|return|>"
WEATHER_CALL = (
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city": "Paris"}<|call|>'
)
WEATHER = ParsedToolCall(name="get_weather", arguments='{"city": "Paris"}')


def call(name: str, arguments: str) -> ParsedToolCall:
    return ParsedToolCall(name=name, arguments=arguments)


CASES = [
    pytest.param(None, ANALYSIS + FINAL, "Think.", "Answer.", [], id="analysis-then-final"),
    pytest.param(
        None, "<|start|>assistant" + ANALYSIS + FINAL, "Think.", "Answer.", [], id="leading-start-token"
    ),
    pytest.param(None, "assistant" + ANALYSIS, "Think.", "", [], id="role-before-channel-without-start"),
    pytest.param(
        None,
        "<|channel|>analysis<|message|>still thinking",
        "still thinking",
        "",
        [],
        id="truncated-analysis",
    ),
    pytest.param(
        None, "<|channel|>analysis<|message|>abc<|en", "abc", "", [], id="token-cut-off-at-the-end-is-dropped"
    ),
    pytest.param(None, ANALYSIS + WEATHER_CALL, "Think.", "", [WEATHER], id="tool-call-on-commentary"),
    pytest.param(
        None,
        '<|channel|>analysis to=functions.lookup <|constrain|>json<|message|>{"q": "x"}<|call|>',
        "",
        "",
        [call("lookup", '{"q": "x"}')],
        id="tool-call-on-analysis-channel",
    ),
    pytest.param(
        None,
        "<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|call|>",
        "",
        "",
        [call("f", "{}")],
        id="recipient-before-channel",
    ),
    pytest.param(
        None,
        "<|channel|>commentary<|message|>Let me check the weather.<|end|>" + WEATHER_CALL,
        "",
        "Let me check the weather.",
        [WEATHER],
        id="commentary-preamble-without-recipient-is-content",
    ),
    pytest.param(
        None,
        '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": 1}',
        "",
        "",
        [call("f", '{"a": 1}')],
        id="tool-call-cut-at-stop-token",
    ),
    pytest.param(
        None,
        ANALYSIS
        + WEATHER_CALL
        + "<|start|>assistant<|channel|>commentary to=functions.g<|message|>[]<|call|>",
        "Think.",
        "",
        [WEATHER, call("g", "[]")],
        id="two-tool-calls-in-order",
    ),
    pytest.param(
        None,
        "<|channel|>commentary to=browser.search<|message|>{}<|call|>",
        "",
        "",
        [call("browser.search", "{}")],
        id="non-function-recipient-keeps-full-name",
    ),
    pytest.param(None, "Hello world", "", "Hello world", [], id="plain-text-is-content"),
    pytest.param(
        None, "Line 1\nLine 2 <b>", "", "Line 1\nLine 2 <b>", [], id="plain-multiline-text-is-content"
    ),
    pytest.param(
        None, "x" * (HEADER_LIMIT + 5), "", "x" * (HEADER_LIMIT + 5), [], id="long-plain-line-is-content"
    ),
    pytest.param(None, "<think>a</think>b", "", "<think>a</think>b", [], id="think-tags-are-plain-text"),
    pytest.param(
        False, ANALYSIS + FINAL, "", "Think.Answer.", [], id="thinking-false-analysis-becomes-content"
    ),
    pytest.param(
        False, ANALYSIS + WEATHER_CALL, "", "Think.", [WEATHER], id="thinking-false-keeps-tool-calls"
    ),
    pytest.param(True, ANALYSIS + FINAL, "Think.", "Answer.", [], id="thinking-true-same-as-default"),
    pytest.param(None, "<|channel|>final<|message|>Hi<|return|>", "", "Hi", [], id="final-only"),
    pytest.param(
        None, "<|start|>assistant<|message|>Hi<|end|>", "", "Hi", [], id="missing-channel-is-content"
    ),
    pytest.param(None, "<|channel|>notes<|message|>x<|end|>", "", "x", [], id="unknown-channel-is-content"),
    pytest.param(None, "<|message|>hi<|end|>", "", "hi", [], id="message-token-without-header"),
    pytest.param(
        None,
        "<|channel|>final<|message|>a <| b <|x|> c <|endx<|return|>",
        "",
        "a <| b <|x|> c <|endx",
        [],
        id="non-token-brackets-are-text",
    ),
    pytest.param(
        None,
        "<|channel|>analysis<|message|>a<|end|>\n\n<|start|>assistant<|channel|>final<|message|>b<|end|>",
        "a",
        "b",
        [],
        id="blank-text-between-messages-dropped",
    ),
    pytest.param(
        None,
        "Note:\n<|start|>assistant<|channel|>final<|message|>b",
        "",
        "Note:\nb",
        [],
        id="stray-text-before-start-is-content",
    ),
    pytest.param(
        None,
        "Hi <|start|>assistant<|channel|>final<|message|>b",
        "",
        "Hi b",
        [],
        id="short-stray-text-before-start",
    ),
    pytest.param(
        None, ANALYSIS + "<|start|>assistant<|channel|>fin", "Think.", "", [], id="unfinished-header-dropped"
    ),
    pytest.param(None, "", "", "", [], id="empty-output"),
    pytest.param(
        None,
        "<|channel|>analysis<|message|>a<|start|>assistant<|channel|>final<|message|>b",
        "a",
        "b",
        [],
        id="new-message-without-end-token",
    ),
    pytest.param(None, "<|end|>x", "", "x", [], id="stray-end-token"),
    pytest.param(
        None,
        "<|channel|>analysis<|message|>if a<b then\nc<|end|><|channel|>analysis<|message|> more<|end|>",
        "if a<b then\nc more",
        "",
        [],
        id="several-analysis-messages-concatenate",
    ),
    pytest.param(
        None,
        '<|channel|>commentary to=functions.f<|message|>{"x": "<|y", "z": "<"}<|call|>',
        "",
        "",
        [call("f", '{"x": "<|y", "z": "<"}')],
        id="brackets-inside-arguments",
    ),
    pytest.param(
        None,
        WEATHER_CALL + "<|start|>assistant<|channel|>final<|message|>It is sunny.<|return|>",
        "",
        "It is sunny.",
        [WEATHER],
        id="tool-call-then-final",
    ),
    pytest.param(
        None,
        "<|start|>assistant<|channel|>analysis<|end|>" + FINAL,
        "",
        "Answer.",
        [],
        id="header-without-body-ignored",
    ),
    pytest.param(None, "  ", "", "", [], id="blank-output-dropped"),
    # -- tool answers, prose before a header, filler, cut-off tokens ------------------------------
    pytest.param(
        None,
        '<|start|>functions.f to=assistant<|channel|>commentary<|message|>{"ok": 1}<|end|>' + FINAL,
        "",
        '{"ok": 1}Answer.',
        [],
        id="tool-answer-addressed-to-assistant-is-content",
    ),
    pytest.param(
        None, "Hi <|channel|>final<|message|>x", "", "Hi x", [], id="prose-before-channel-is-content"
    ),
    pytest.param(None, "Hi<|message|>x<|end|>", "", "Hix", [], id="prose-before-message-is-content"),
    pytest.param(
        None,
        "assistant to=functions.f<|channel|>commentary json<|message|>{}<|call|>",
        "",
        "",
        [call("f", "{}")],
        id="role-and-recipient-before-channel-without-start",
    ),
    pytest.param(
        None,
        WEATHER_CALL + "final<|start|>assistant<|channel|>final<|message|>Done",
        "",
        "Done",
        [WEATHER],
        id="channel-name-filler-before-start-dropped",
    ),
    pytest.param(
        None,
        '<|channel|>commentary to=functions.f<|message|>{"a": 1}<|ca',
        "",
        "",
        [call("f", '{"a": 1}')],
        id="call-token-cut-off-at-the-end-is-dropped",
    ),
    pytest.param(None, "a <", "", "a <", [], id="lone-bracket-at-the-end-is-text"),
    # -- the stripped form (special tokens removed by the host) ----------------------------------
    pytest.param(
        None,
        'analysisNeed the weather.assistantcommentary to=functions.get_weather json{"city": "Paris"}',
        "Need the weather.",
        "",
        [WEATHER],
        id="stripped-tool-call-with-constraint",
    ),
    pytest.param(
        None,
        'analysisA.assistantcommentary to=functions.get_weather{"city": "Paris"}assistantfinalSunny.',
        "A.",
        "Sunny.",
        [WEATHER],
        id="stripped-tool-call-then-final",
    ),
    pytest.param(
        None,
        "assistantanalysis Think. assistantcommentary Checking. assistantfinal Answer.",
        "Think.",
        "Checking.Answer.",
        [],
        id="stripped-preamble-and-final",
    ),
    pytest.param(
        False, "analysisThink.assistantfinalAnswer.", "", "Think.Answer.", [], id="stripped-thinking-false"
    ),
    pytest.param(
        None,
        "analysisthe assistant said so\n assistantfin",
        "the assistant said so\n assistantfin",
        "",
        [],
        id="stripped-marker-prefix-at-the-end-is-text",
    ),
    pytest.param(None, "analysis to be sure", "to be sure", "", [], id="stripped-to-without-equals-is-text"),
    pytest.param(None, "final", "", "", [], id="channel-name-alone-is-an-empty-message"),
    pytest.param(None, "analysisx<|end|>tail", "x", "tail", [], id="stripped-then-token-form"),
    # The price of reading the stripped form: gpt-oss output opening with a channel name is read so.
    pytest.param(
        None, "Analysis: fine", ": fine", "", [], id="output-opening-with-a-channel-name-is-the-stripped-form"
    ),
    pytest.param(None, "Analyses: fine", "", "Analyses: fine", [], id="other-words-are-content"),
]


@pytest.mark.parametrize(("thinking", "text", "reasoning", "content", "calls"), CASES)
def test_parse(
    thinking: bool | None, text: str, reasoning: str, content: str, calls: list[ParsedToolCall]
) -> None:
    assert get_reasoning_parser("gpt-oss").parse(text, thinking) == ReasoningSplit(reasoning, content, calls)


@pytest.mark.parametrize(("thinking", "text", "reasoning", "content", "calls"), CASES)
def test_stream_in_any_chunking(
    thinking: bool | None, text: str, reasoning: str, content: str, calls: list[ParsedToolCall]
) -> None:
    parser = get_reasoning_parser("gpt-oss")
    for chunks in chunkings(text):
        assert feed_all(parser, chunks, thinking) == ReasoningSplit(reasoning, content, calls), chunks


@pytest.mark.parametrize(
    ("header", "channel", "recipient"),
    [
        pytest.param("assistant<|channel|>analysis", "analysis", None, id="role-and-channel"),
        pytest.param(
            "<|channel|>commentary to=functions.f <|constrain|>json", "commentary", "functions.f", id="after"
        ),
        pytest.param(
            "assistant to=functions.f<|channel|>commentary json", "commentary", "functions.f", id="before"
        ),
        pytest.param("to=functions.f", "", "functions.f", id="recipient-only"),
        pytest.param("assistant", "", None, id="role-only"),
        pytest.param(
            "<|channel|>final auto=functions.x", "final", None, id="to-inside-a-word-is-no-recipient"
        ),
    ],
)
def test_read_header(header: str, channel: str, recipient: str | None) -> None:
    assert read_header(header) == (channel, recipient)


def test_tool_call_is_reported_in_the_delta_that_ends_it() -> None:
    stream = get_reasoning_parser("gpt-oss").stream()
    assert stream.feed("<|channel|>commentary to=functions.f<|message|>{") == ("", "", ())
    assert stream.feed('"a": 1}<|ca') == ("", "", ())
    assert stream.feed("ll|>") == ("", "", (call("f", '{"a": 1}'),))
    assert stream.finish() == ("", "", ())


def test_reasoning_streams_before_its_message_ends() -> None:
    stream = get_reasoning_parser("gpt-oss").stream()
    assert stream.feed("<|channel|>analysis<|message|>Let") == ("Let", "", ())
    assert stream.feed(" me<") == (" me", "", ())
    assert stream.feed("|end|><|start|>assistant<|channel|>final<|message|>Hi") == ("", "Hi", ())


def test_feed_after_finish_is_refused() -> None:
    stream = get_reasoning_parser("gpt-oss").stream()
    stream.finish()
    with pytest.raises(ValueError, match="after finish"):
        stream.feed("x")


def test_plain_text_streams_once_it_cannot_be_a_header() -> None:
    stream = get_reasoning_parser("gpt-oss").stream()
    assert stream.feed("Hello") == ("", "", ())  # could still be a role before <|channel|>
    assert stream.feed(" there\n") == ("", "Hello there\n", ())
    assert stream.feed("more") == ("", "more", ())


def test_holdback_in_a_body_never_exceeds_a_token() -> None:
    stream = get_reasoning_parser("gpt-oss").stream()
    stream.feed("<|channel|>final<|message|>")
    released = 0
    for fed, char in enumerate("<|en<|star<|<|constrai<<|x|>" * 50, start=1):
        released += len(stream.feed(char).content)
        assert fed - released < len("<|constrain|>")


def test_stripped_form_holdback_never_exceeds_a_marker() -> None:
    stream = get_reasoning_parser("gpt-oss").stream()
    stream.feed("analysis")
    released = 0
    for fed, char in enumerate("assistan-assistantfinx-Assistantcommentar!a" * 40, start=1):
        released += len(stream.feed(char).reasoning)
        assert fed - released < len("assistantcommentary")


def test_stripped_form_streams_before_the_message_ends() -> None:
    stream = get_reasoning_parser("gpt-oss").stream()
    assert stream.feed("analysisLet") == ("Let", "", ())
    assert stream.feed(" me think.assis") == (" me think.", "", ())
    assert stream.feed("tantfinalIt is ") == ("", "It is", ())
    assert stream.feed("4.") == ("", " 4.", ())
    assert stream.finish() == ("", "", ())


def test_stripped_tool_call_is_reported_when_the_next_message_starts() -> None:
    stream = get_reasoning_parser("gpt-oss").stream()
    assert stream.feed('commentary to=functions.f json{"a": 1}') == ("", "", ())
    assert stream.feed("assistantfinalok") == ("", "ok", (call("f", '{"a": 1}'),))


@pytest.mark.parametrize(
    ("third", "delta"),
    [
        pytest.param("nd so.", (" and so.", "", ()), id="ink-releases-the-white-space-and-the-a"),
        pytest.param("ssistantfinalYes", ("", "Yes", ()), id="a-marker-drops-the-white-space"),
    ],
)
def test_stripped_form_holds_white_space_then_a_marker_beginning(
    third: str, delta: tuple[str, str, tuple[ParsedToolCall, ...]]
) -> None:
    stream = get_reasoning_parser("gpt-oss").stream()
    assert stream.feed("analysisIs it") == ("Is it", "", ())
    assert stream.feed(" a") == ("", "", ())  # " a" may be the white space before "assistant…"
    assert stream.feed(third) == delta
    assert stream.finish() == ("", "", ())


def test_stripped_form_long_blank_run_waits_for_ink_and_is_dropped_before_a_marker() -> None:
    stream = get_reasoning_parser("gpt-oss").stream()
    assert stream.feed("analysisx") == ("x", "", ())
    assert all(stream.feed(" ") == ("", "", ()) for _ in range(100))
    assert stream.feed("y") == (" " * 100 + "y", "", ())
    assert all(stream.feed(char) == ("", "", ()) for char in " " * 100 + "\n" * 50)
    assert stream.feed("assistantfinal") == ("", "", ())
    assert stream.feed("z") == ("", "z", ())
    assert stream.finish() == ("", "", ())


@pytest.mark.parametrize(
    ("chunks", "deltas"),
    [
        pytest.param(
            ["analysisx", "<", "", "b"], [("x", ""), ("", ""), ("", ""), ("<b", ""), ("", "")], id="plain-lt"
        ),
        # The token ends the message; text after it is content once the output ends.
        pytest.param(
            ["analysisx <", "|end|>tail"], [("x", ""), ("", ""), ("", "tail")], id="lt-begins-a-token"
        ),
    ],
)
def test_stripped_form_holds_a_final_lt_until_the_next_chunk(
    chunks: list[str], deltas: list[tuple[str, str]]
) -> None:
    stream = get_reasoning_parser("gpt-oss").stream()
    assert [stream.feed(chunk)[:2] for chunk in chunks] + [stream.finish()[:2]] == deltas


def test_white_space_list_is_what_isspace_accepts() -> None:
    every = "".join(c for c in map(chr, range(0x110000)) if c.isspace())
    assert every == WHITE_SPACE


def test_fast_path_codes_are_the_numbers_feed_is_written_with() -> None:
    # feed() and _feed_stripped() compare ``_fast`` with literal numbers (cheaper than globals).
    assert (reader.REASONING, reader.CONTENT, reader.TOOL, reader.SLOW) == (0, 1, 2, -1)
    assert (reader.STRIPPED, reader.STRIPPED_LT) == (3, -5)
    assert (reader.STRIPPED_REASONING, reader.STRIPPED_CONTENT) == (3, 4)
