"""Tests of the ``<function_call>`` protocol: parsing, thinking sections, tags, messages, guide."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.reasoner.function_calling import (
    FUNCTION_CALLING_GUIDE,
    PAYLOAD_END,
    PAYLOAD_START,
    ParsedFunctionCall,
    extract_tag,
    format_parse_error,
    has_function_calls,
    parse_function_calls,
    strip_thinking,
)

S, E = PAYLOAD_START, PAYLOAD_END


@dataclass(frozen=True)
class Ok:
    """An entry expected to parse: name, args and objective."""

    name: str
    args: dict[str, Any]
    objective: str = ""


@dataclass(frozen=True)
class Bad:
    """An entry expected to carry an error holding ``fragment`` (case-insensitive)."""

    fragment: str
    name: str = ""


def call(name: str, args: Any = None, objective: str = "go", *, body: str | None = None) -> str:
    """A well-formed block; ``body`` replaces the JSON when given."""
    if body is None:
        body = json.dumps({"name": name, "call_objective": objective, "args": args or {}})
    return f"<function_call>\n{body}\n</function_call>"


CASES = [
    # -- basics ---------------------------------------------------------------------------------
    pytest.param(call("add", {"a": 1, "b": 2}), [Ok("add", {"a": 1, "b": 2}, "go")], id="single-call"),
    pytest.param("no tools today", [], id="no-calls"),
    pytest.param(
        '<function_call>{"name": "ping", "call_objective": "check"}</function_call>',
        [Ok("ping", {}, "check")],
        id="args-missing-is-empty",
    ),
    pytest.param(
        '<function_call>{"name": "ping", "args": {"n": 1}}</function_call>',
        [Ok("ping", {"n": 1}, "")],
        id="objective-missing-is-empty",
    ),
    pytest.param(
        '<function_call>{"name": "  ping ", "args": {}}</function_call>',
        [Ok("ping", {})],
        id="name-white-space-stripped",
    ),
    pytest.param(
        call("a", {"i": 1}) + "\ntext\n" + call("b", {"i": 2}) + call("c", {"i": 3}),
        [Ok("a", {"i": 1}, "go"), Ok("b", {"i": 2}, "go"), Ok("c", {"i": 3}, "go")],
        id="multiple-calls-in-order",
    ),
    # -- tags anywhere on a line -----------------------------------------------------------------
    pytest.param(
        '<action><function_call>{"name": "x", "args": {"k": "v"}}</function_call></action>',
        [Ok("x", {"k": "v"})],
        id="inline-tags",
    ),
    pytest.param(
        'Now: <function_call>{"name": "a"}</function_call> and <function_call>{"name": "b"}</function_call>.',
        [Ok("a", {}), Ok("b", {})],
        id="two-calls-on-one-line",
    ),
    # -- payload wrappers ------------------------------------------------------------------------
    pytest.param(
        f'<function_call>\n{{"name": "py", "args": {{"code": {S}\nprint("hi")\n{E}}}}}\n</function_call>',
        [Ok("py", {"code": 'print("hi")\n'})],
        id="payload-drops-newline-after-start-keeps-final-newline",
    ),
    pytest.param(
        f'<function_call>{{"name": "w", "args": {{"a": {S}\none\n{E}, "b": {S}\ntwo\nlines\n{E}, "n": 3}}}}'
        "</function_call>",
        [Ok("w", {"a": "one\n", "b": "two\nlines\n", "n": 3})],
        id="payload-several-fields",
    ),
    pytest.param(
        f'<function_call>{{"name": "w", "args": {{"files": [{S}\nA\n{E}, {{"body": {S}\nB "q"\n{E}}}]}}}}'
        "</function_call>",
        [Ok("w", {"files": ["A\n", {"body": 'B "q"\n'}]})],
        id="payload-nested-in-array-and-object",
    ),
    pytest.param(
        f'<function_call>{{"name": "save", "args": {{"text": {S}\n'
        f"see </function_call> and <think> here\n{E}}}}}</function_call>",
        [Ok("save", {"text": "see </function_call> and <think> here\n"})],
        id="payload-with-closing-tag",
    ),
    pytest.param(
        f'<function_call>{{"name": "q", "args": {{"sql": "{S}\nSELECT "a" FROM t\n{E}"}}}}</function_call>',
        [Ok("q", {"sql": 'SELECT "a" FROM t\n'})],
        id="payload-markers-in-quotes",
    ),
    pytest.param(
        f'<function_call>{{"name": "py", "args": {{"code": {S}\nd = {{"k": [1, 2,]}}  # \\n stays\\\n'
        f"s = 'it''s'\n{E}}}}}</function_call>",
        [Ok("py", {"code": "d = {\"k\": [1, 2,]}  # \\n stays\\\ns = 'it''s'\n"})],
        id="payload-with-quotes-backslashes-braces-verbatim",
    ),
    pytest.param(
        f'<function_call>{{"name": "e", "args": {{"v": {S}x y{E}}}}}</function_call>',
        [Ok("e", {"v": "x y"})],
        id="payload-on-one-line",
    ),
    pytest.param(
        f'<function_call>\n{{"name": "e", "args": {{"v": {S}   \n'
        f"  indented\n\n    {E}\n  }}}}\n</function_call>",
        [Ok("e", {"v": "  indented\n\n"})],
        id="payload-blank-start-line-and-end-marker-indentation-dropped",
    ),
    pytest.param(
        f'<function_call>{{"name": "e", "args": {{"v": {S}\n{E}}}}}</function_call>',
        [Ok("e", {"v": ""})],
        id="payload-empty",
    ),
    pytest.param(
        f'<function_call>{{"name": "e", "args": {{"v": {S}\n\n{E}}}}}</function_call>',
        [Ok("e", {"v": "\n"})],
        id="payload-one-empty-line",
    ),
    # -- the heredoc rule (DESIGN.md, function-call protocol) ------------------------------------
    pytest.param(
        f'<function_call>{{"name": "w", "args": {{"file": {S}\nline 1\nline 2\n{E}}}}}</function_call>',
        [Ok("w", {"file": "line 1\nline 2\n"})],
        id="heredoc-file-keeps-its-final-newline",
    ),
    pytest.param(
        f'<function_call>{{"name": "w", "args": {{"file": {S}\nline 1\nline 2{E}}}}}</function_call>',
        [Ok("w", {"file": "line 1\nline 2"})],
        id="heredoc-end-marker-after-text-no-final-newline",
    ),
    pytest.param(
        f'<function_call>{{"name": "w", "args": {{"file": {S}\nend\n\n{E}}}}}</function_call>',
        [Ok("w", {"file": "end\n\n"})],
        id="heredoc-trailing-blank-line-kept",
    ),
    pytest.param(
        f'<function_call>{{"name": "w", "args": {{"file": {S}\n\nafter a blank line\n{E}}}}}</function_call>',
        [Ok("w", {"file": "\nafter a blank line\n"})],
        id="heredoc-only-one-newline-after-start-dropped",
    ),
    pytest.param(
        f'<function_call>{{"name": "w", "args": {{"file": {S}first\nsecond\n{E}}}}}</function_call>',
        [Ok("w", {"file": "first\nsecond\n"})],
        id="heredoc-text-on-the-start-line-kept",
    ),
    pytest.param(
        f'<function_call>{{"name": "w", "args": {{"file": {S}\nx = 1\n\t  {E}\n}}}}</function_call>',
        [Ok("w", {"file": "x = 1\n"})],
        id="heredoc-indented-end-marker-keeps-newline-drops-indentation",
    ),
    pytest.param(
        f'<function_call>{{"name": "w", "args": {{"file": {S} \t\r\nx = 1\r\n{E}}}}}</function_call>',
        [Ok("w", {"file": "x = 1\r\n"})],
        id="heredoc-crlf-start-line-dropped-crlf-end-kept",
    ),
    pytest.param(
        f'<function_call>{{"name": "w", "args": {{"file": "{S}\nquoted\n{E}"}}}}</function_call>',
        [Ok("w", {"file": "quoted\n"})],
        id="heredoc-quoted-markers-same-rule",
    ),
    pytest.param(
        f'<function_call>{{"name": "e", "args": {{"v": {S}\nno end</function_call>' + call("next", {"i": 1}),
        [Bad("has no __PAYLOAD_END__"), Ok("next", {"i": 1}, "go")],
        id="payload-without-end-marker",
    ),
    # -- strings are never changed by repairs ----------------------------------------------------
    pytest.param(
        call("s", {"url": "https://x.org//a", "note": "// not a comment", "c": "/* nor this */"}),
        [Ok("s", {"url": "https://x.org//a", "note": "// not a comment", "c": "/* nor this */"}, "go")],
        id="strings-with-comment-markers-unchanged",
    ),
    pytest.param(
        call("s", {"a": "[1,2,]", "b": "{'a': 1}", "c": "True", "d": "None, False", "e": "{,}"}),
        [Ok("s", {"a": "[1,2,]", "b": "{'a': 1}", "c": "True", "d": "None, False", "e": "{,}"}, "go")],
        id="strings-with-repairable-text-unchanged",
    ),
    pytest.param(
        '<function_call>{"name": "s", "args": {"re": "\\d+\\.\\w", "path": "C:\\temp"}}</function_call>',
        [Ok("s", {"re": "\\d+\\.\\w", "path": "C:\temp"})],
        id="unknown-escapes-kept-as-written",
    ),
    pytest.param(
        '<function_call>{"name": "s", "args": {"text": "line one\nline two\tTAB"}}</function_call>',
        [Ok("s", {"text": "line one\nline two\tTAB"})],
        id="raw-newline-and-tab-in-string",
    ),
    # -- repairs outside strings -----------------------------------------------------------------
    pytest.param(
        '<function_call>{"name": "r", "args": {"l": [1, 2,], "o": {"k": 1,},},}</function_call>',
        [Ok("r", {"l": [1, 2], "o": {"k": 1}})],
        id="trailing-commas-repaired",
    ),
    pytest.param(
        '<function_call>{"name": "r", "args": {"a": True, "b": False, "c": None, "d": [true, null]}}'
        "</function_call>",
        [Ok("r", {"a": True, "b": False, "c": None, "d": [True, None]})],
        id="python-literals-repaired",
    ),
    pytest.param(
        '<function_call>\n{\n  // which tool\n  "name": "r", /* inline */ "args": {"n": 1}\n}\n'
        "</function_call>",
        [Ok("r", {"n": 1})],
        id="comments-outside-strings-skipped",
    ),
    # -- line endings and unicode ----------------------------------------------------------------
    pytest.param(
        '<action>\r\n<function_call>\r\n{\r\n  "name": "c",\r\n  "args": {"x": 1}\r\n}\r\n'
        "</function_call>\r\n</action>",
        [Ok("c", {"x": 1})],
        id="crlf-line-endings",
    ),
    pytest.param(
        f'<function_call>\r\n{{"name": "c", "args": {{"code": {S}\r\n'
        f"a = 1\r\nb = 2\r\n{E}}}}}\r\n</function_call>",
        [Ok("c", {"code": "a = 1\r\nb = 2\r\n"})],
        id="crlf-payload-keeps-inner-line-endings",
    ),
    pytest.param(
        '<function_call>{"name": "翻译", "call_objective": "traduire «ceci»", '
        '"args": {"texte": "héllo 世界 🚀", "esc": "\\u00e9\\ud83d\\ude80"}}</function_call>',
        [Ok("翻译", {"texte": "héllo 世界 🚀", "esc": "é🚀"}, "traduire «ceci»")],
        id="unicode-and-unicode-escapes",
    ),
    # -- thinking sections -----------------------------------------------------------------------
    pytest.param(
        "<think>maybe " + call("no") + "</think>" + call("yes"),
        [Ok("yes", {}, "go")],
        id="call-in-think-ignored",
    ),
    pytest.param(
        "<deep_thinking>\n" + call("no") + "\n</deep_thinking>\n<action>" + call("yes") + "</action>",
        [Ok("yes", {}, "go")],
        id="call-in-deep-thinking-ignored",
    ),
    pytest.param(
        "<shallow_thinking>" + call("no") + "</shallow_thinking>",
        [],
        id="call-in-shallow-thinking-ignored",
    ),
    pytest.param(
        call("yes") + "<think>unclosed thinking " + call("no"),
        [Ok("yes", {}, "go")],
        id="unclosed-thinking-hides-the-rest",
    ),
    pytest.param(
        call("w", {"text": "<think>not thinking</think> and <deep_thinking>"}) + call("after"),
        [Ok("w", {"text": "<think>not thinking</think> and <deep_thinking>"}, "go"), Ok("after", {}, "go")],
        id="thinking-tags-inside-a-string",
    ),
    pytest.param(
        f'<function_call>{{"name": "w", "args": {{"t": {S}\n<shallow_thinking>\n{E}}}}}</function_call>'
        + call("after"),
        [Ok("w", {"t": "<shallow_thinking>\n"}), Ok("after", {}, "go")],
        id="thinking-tag-inside-a-payload",
    ),
    # -- fences ----------------------------------------------------------------------------------
    pytest.param(
        '<function_call>\n```json\n{"name": "f", "args": {"a": 1}}\n```\n</function_call>',
        [Ok("f", {"a": 1})],
        id="json-fence-inside-block-unwrapped",
    ),
    pytest.param(
        '<function_call>```\n{"name": "f"}```</function_call>',
        [Ok("f", {})],
        id="plain-fence-inside-block-unwrapped",
    ),
    pytest.param(
        '```xml\n<action>\n<function_call>\n```json\n{"name": "f"}\n```\n</function_call>\n</action>\n```',
        [Ok("f", {})],
        id="fences-inside-and-outside-counted-once",
    ),
    # -- errors: never silent, never an exception ------------------------------------------------
    pytest.param('<function_call>{"name": "u", "args": {}}', [Bad("not closed", "u")], id="unclosed-at-end"),
    pytest.param(
        '<function_call>{"name": "u"}\n<function_call>{"name": "v"}</function_call>',
        [Bad("not closed", "u"), Ok("v", {})],
        id="unclosed-before-next-block",
    ),
    pytest.param(
        call("", body='[{"name": "a"}, {"name": "b"}]'),
        [Bad("holds an array, not a JSON object")],
        id="not-an-object-array",
    ),
    pytest.param(call("", body='"add"'), [Bad("holds a string")], id="not-an-object-string"),
    pytest.param(call("", body='{"args": {"a": 1}}'), [Bad('no "name"')], id="missing-name"),
    pytest.param(call("", body='{"name": "", "args": {}}'), [Bad("non-empty string")], id="empty-name"),
    pytest.param(call("", body='{"name": 7}'), [Bad("not a number (7)")], id="name-not-a-string"),
    pytest.param(
        call("", body='{"name": "t", "call_objective": "o", "args": "{\\"a\\": 1}"}'),
        [Bad('"args" must be a JSON object', name="t")],
        id="args-is-a-string",
    ),
    pytest.param(call("", body='{"name": "t", "args": null}'), [Bad("not null", "t")], id="args-null"),
    pytest.param(call("", body='{"name": "t", "args": [1]}'), [Bad("not an array", "t")], id="args-array"),
    pytest.param(
        call("", body='{"name": "t", "arguments": {"a": 1}}'),
        [Bad('under "args", not "arguments"', "t")],
        id="args-under-another-key",
    ),
    pytest.param(
        call("", body='{"name": "t" "args": {}}'),
        [Bad("line 2, column 14")],
        id="missing-comma-located",
    ),
    pytest.param(
        call("", body="{'name': 't'}"), [Bad("single quotes are not JSON")], id="single-quotes-refused"
    ),
    pytest.param(call("", body='{name: "t"}'), [Bad('write "name"')], id="unquoted-key-refused"),
    pytest.param(
        '<function_call>{"name": "t", "args": {"a": "open}</function_call>\n' + call("next"),
        [Bad("never closed"), Ok("next", {}, "go")],
        id="unterminated-string-does-not-swallow-next-block",
    ),
    pytest.param(
        call("good1") + call("", body='{"name": "bad",, }') + call("good2"),
        [Ok("good1", {}, "go"), Bad("expected a property name"), Ok("good2", {}, "go")],
        id="bad-block-beside-good-ones",
    ),
    pytest.param("<function_call>\n</function_call>", [Bad("empty")], id="empty-block"),
    pytest.param(
        call("", body='{"name": "a"} {"name": "b"}'),
        [Bad("one object only", "a")],
        id="two-objects-in-one-block",
    ),
    pytest.param(
        "I will write a <function_call> block next.\n" + call("real"),
        [Bad("leave out its angle brackets"), Ok("real", {}, "go")],
        id="tag-mentioned-in-prose",
    ),
    pytest.param(
        "<function_call><function_call>" + '{"name": "d"}' + "</function_call></function_call>",
        [Ok("d", {})],
        id="repeated-opening-tag-counted-once",
    ),
    pytest.param(
        '{"name": "x"}</function_call> stray close tag',
        [],
        id="stray-closing-tag-is-text",
    ),
    pytest.param(
        '<function_call>{"name": "x"} /* never closed',
        [Bad("not closed", "x")],
        id="unclosed-comment-after-object",
    ),
    pytest.param(
        call("t", {"v": f"{S} is the start marker"}),
        [Ok("t", {"v": f"{S} is the start marker"}, "go")],
        id="quoted-start-marker-without-end-is-a-string",
    ),
    pytest.param(
        call("", body="[" * 150 + "]" * 150),
        [Bad("nested deeper")],
        id="too-deep-nesting-refused",
    ),
    pytest.param(
        '<function_call>{"name": "cut", "args": {"a": [1, 2',
        [Bad("was the reply cut off?")],
        id="reply-cut-off-inside-json",
    ),
]


def _check(calls: list[ParsedFunctionCall], expected: list[Ok | Bad]) -> None:
    assert len(calls) == len(expected), calls
    for got, want in zip(calls, expected, strict=True):
        if isinstance(want, Ok):
            assert got.error is None, got.error
            assert got.ok
            assert (got.name, got.args, got.call_objective) == (want.name, want.args, want.objective)
        else:
            assert got.error is not None, got
            assert not got.ok
            assert want.fragment.lower() in got.error.lower(), got.error
            assert got.name == want.name
            assert len(got.error) < 400, "errors are short prompts"


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_parse_function_calls(text: str, expected: list[Ok | Bad]) -> None:
    _check(parse_function_calls(text), expected)


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_has_function_calls_agrees_with_parse(text: str, expected: list[Ok | Bad]) -> None:
    assert has_function_calls(text) == bool(expected)


def test_raw_is_the_text_between_the_tags() -> None:
    text = f'<action><function_call> {{"name": "p", "args": {{"c": {S}\nx\n{E}}}}} </function_call></action>'
    [parsed] = parse_function_calls(text)
    assert parsed.raw == f' {{"name": "p", "args": {{"c": {S}\nx\n{E}}}}} '


def test_raw_of_an_unclosed_block_stops_before_the_next_block() -> None:
    first, second = parse_function_calls('<function_call>{"name": "u"}\n<function_call>{"name": "v"}')
    assert first.raw == '{"name": "u"}\n'
    assert second.error is not None and "not closed" in second.error


def test_error_names_the_place_and_quotes_the_text() -> None:
    [parsed] = parse_function_calls(
        '<function_call>\n{"name": "t",\n "args": {"a": 1 "b": 2}}\n</function_call>'
    )
    assert parsed.error is not None
    assert "line 3, column 18" in parsed.error
    assert "'\"b\": 2}}'" in parsed.error
    assert "expected ',' or '}' after the value of \"a\"" in parsed.error


def test_format_parse_error_is_short_and_shows_the_shape() -> None:
    [parsed] = parse_function_calls(call("", body='{"name": "t", "args": 5}'))
    message = format_parse_error(parsed)
    assert message.startswith("The call to 't' was not run:")
    assert '"args" must be a JSON object' in message
    assert '<function_call>{"name": "tool_name"' in message
    assert PAYLOAD_START not in message and len(message) < len(FUNCTION_CALLING_GUIDE) / 3


def test_format_parse_error_without_a_name() -> None:
    [parsed] = parse_function_calls("<function_call>[1]</function_call>")
    assert format_parse_error(parsed).startswith("This <function_call> block was not run:")


def test_format_parse_error_refuses_a_good_call() -> None:
    [parsed] = parse_function_calls(call("fine"))
    with pytest.raises(ValueError, match="no parse error"):
        format_parse_error(parsed)


def test_parsed_call_is_frozen_and_round_trips_as_json() -> None:
    [parsed] = parse_function_calls(call("add", {"a": [1, {"b": None}]}))
    with pytest.raises(ValueError):
        parsed.name = "other"  # type: ignore[misc]
    data = json.loads(json.dumps(parsed.model_dump(mode="json")))
    assert ParsedFunctionCall.model_validate(data) == parsed


def test_guide_covers_the_protocol_and_its_examples_parse() -> None:
    guide = FUNCTION_CALLING_GUIDE
    for needle in (
        "<action>",
        '"name"',
        '"call_objective"',
        '"args"',
        "double quotes",
        "trailing commas",
        PAYLOAD_START,
        PAYLOAD_END,
        "several",
        "<function_call_result>",
    ):
        assert needle in guide, needle
    examples = [c for c in parse_function_calls(guide) if c.ok]
    assert [c.name for c in examples] == ["search_docs", "run_python"]
    assert examples[1].args["code"] == 'sentence = "the quick brown fox"\nprint(len(sentence.split()))\n'


# -- strip_thinking and extract_tag ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("plain", "plain", id="nothing-to-strip"),
        pytest.param("a<think>x</think>b", "ab", id="think"),
        pytest.param(
            "<deep_thinking>\nx\n</deep_thinking>\nA<shallow_thinking>y</shallow_thinking>B",
            "\nAB",
            id="deep-and-shallow",
        ),
        pytest.param("keep<think>never closed <action>", "keep", id="unclosed-removed-to-end"),
        pytest.param("a</think>b", "a</think>b", id="stray-closing-tag-kept"),
        pytest.param(
            call("w", {"t": "<think>x</think>"}) + "<think>y</think>z",
            call("w", {"t": "<think>x</think>"}) + "z",
            id="thinking-tag-inside-a-call-kept",
        ),
        pytest.param("a\r\n<think>x\r\n</think>\r\nb", "a\r\n\r\nb", id="crlf"),
    ],
)
def test_strip_thinking(text: str, expected: str) -> None:
    assert strip_thinking(text) == expected


@pytest.mark.parametrize(
    ("text", "tag", "expected"),
    [
        pytest.param(
            "x <deliverable>\n done \n</deliverable> y", "deliverable", "done", id="found-and-stripped"
        ),
        pytest.param("nothing here", "deliverable", None, id="absent"),
        pytest.param("<deliverable>cut off", "deliverable", None, id="unclosed"),
        pytest.param(
            "<think><deliverable>draft</deliverable></think>", "deliverable", None, id="only-in-thinking"
        ),
        pytest.param(
            "<think><input>a</input></think><input>b</input>", "input", "b", id="first-outside-thinking"
        ),
        pytest.param(
            "<instruction>one</instruction><instruction>two</instruction>",
            "instruction",
            "one",
            id="first-of-several",
        ),
        pytest.param(
            "<action>a<think></action></think>b</action>",
            "action",
            "a<think></action></think>b",
            id="closing-tag-inside-thinking-skipped",
        ),
        pytest.param(
            f"<action>{call('w', {'t': '</action>'})}</action>",
            "action",
            call("w", {"t": "</action>"}),
            id="closing-tag-inside-a-call-skipped",
        ),
        pytest.param(
            call("w", {"t": "<deliverable>no</deliverable>"}),
            "deliverable",
            None,
            id="tag-inside-a-call-ignored",
        ),
        pytest.param("<think>t</think>", "think", "t", id="thinking-tag-itself"),
        pytest.param(
            "a" + call("f") + "b",
            "function_call",
            '{"name": "f", "call_objective": "go", "args": {}}',
            id="function-call-tag",
        ),
        pytest.param("<input>\r\nü\r\n</input>", "input", "ü", id="crlf-unicode"),
    ],
)
def test_extract_tag(text: str, tag: str, expected: str | None) -> None:
    assert extract_tag(text, tag) == expected


# -- size and robustness -----------------------------------------------------------------------

MEGABYTE = 1_000_000


def _megabyte_of(unit: str) -> str:
    return unit * (MEGABYTE // len(unit) + 1)


def _big_inputs() -> list[Any]:
    prose = 'Some prose with <b>tags</b>, {braces}, "quotes" and // slashes.\n'
    payload = call(
        "", body=f'{{"name": "p", "args": {{"c": {S}\n' + 'x = "y" </function_call>\n' * 40 + f"{E}}}}}"
    )
    return [
        pytest.param(_megabyte_of(prose + call("n", {"i": 1}) + payload), id="many-calls-and-prose"),
        pytest.param(
            call("", body=f'{{"name": "big", "args": {{"c": {S}\n{"a" * MEGABYTE}\n{E}}}}}'), id="one-payload"
        ),
        pytest.param(_megabyte_of("<function_call>"), id="only-opening-tags"),
        pytest.param(
            _megabyte_of('<function_call>{"name": "x", "args": {"s": "unclosed \n'), id="unclosed-strings"
        ),
        pytest.param(_megabyte_of(f"<function_call>{{{S} "), id="payloads-without-end"),
        pytest.param(_megabyte_of(f'<function_call>{{"a": "{S} '), id="quoted-payloads-without-end"),
        pytest.param("<function_call>" + "[" * MEGABYTE, id="deep-brackets"),
        pytest.param("<think>" + _megabyte_of(call("x")), id="huge-unclosed-thinking"),
        pytest.param(_megabyte_of("<function_call>{/*" + " " * 20), id="unclosed-comments"),
        pytest.param("<function_call>" + _megabyte_of('"\\'), id="escapes-everywhere"),
        pytest.param(_megabyte_of('<function_call>["<function_call>[", '), id="strings-holding-tags"),
    ]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("text", _big_inputs())
def test_megabyte_inputs_complete(text: str) -> None:
    assert len(text) >= MEGABYTE
    calls = parse_function_calls(text)
    assert has_function_calls(text) == bool(calls)
    if text.startswith("Some prose"):
        assert len(calls) > 1000 and all(c.ok for c in calls)
    strip_thinking(text)
    extract_tag(text, "action")


def test_megabyte_input_finds_every_call() -> None:
    blocks = MEGABYTE // 100
    text = "".join(call("n", {"i": i}) + "\nprose\n" for i in range(blocks))
    calls = parse_function_calls(text)
    assert [c.args["i"] for c in calls] == list(range(blocks))


_fragments = st.sampled_from(
    [
        "<function_call>",
        "</function_call>",
        "<think>",
        "</think>",
        "<deep_thinking>",
        "</deep_thinking>",
        S,
        E,
        '"',
        "\\",
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        "```json",
        "\n",
        "\r\n",
        '"name"',
        '"args"',
        "True",
        "//",
        "/*",
        "*/",
        "x",
        " ",
        "1",
        "é",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_fragments, max_size=40).map("".join))
def test_any_text_parses_without_raising(text: str) -> None:
    calls = parse_function_calls(text)
    assert has_function_calls(text) == bool(calls)
    assert all(c.ok == (c.error is None) for c in calls)
    strip_thinking(text)
    for tag in ("action", "deliverable", "think", "function_call"):
        extract_tag(text, tag)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(), _json_values, max_size=5), st.booleans())
def test_any_json_args_round_trip(args: dict[str, Any], ascii_only: bool) -> None:
    body = json.dumps({"name": "t", "args": args}, ensure_ascii=ascii_only)
    [parsed] = parse_function_calls(call("", body=body))
    assert parsed.error is None and parsed.args == args


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_characters="\r")).filter(lambda t: E not in t))
def test_any_payload_text_round_trips(value: str) -> None:
    # The heredoc rule: the newline after the start marker is dropped, the text's last line break
    # (before an end marker on its own line) is kept; on one line the text is taken as it is.
    body = f'{{"name": "t", "args": {{"v": {S}\n{value}\n{E}, "w": "{S}\n{value}\n{E}"}}}}'
    [parsed] = parse_function_calls(call("", body=body))
    assert parsed.error is None, parsed.error
    assert parsed.args == {"v": value + "\n", "w": value + "\n"}
    one_line = value.replace("\n", " ")
    [parsed] = parse_function_calls(call("", body=f'{{"name": "t", "args": {{"v": {S}{one_line}{E}}}}}'))
    assert parsed.args == {"v": one_line}
