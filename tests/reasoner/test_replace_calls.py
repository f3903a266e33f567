"""``replace_calls``: function-call blocks folded for a summary, cut as the parser cuts them."""

from __future__ import annotations

import pytest

from tandem.reasoner.function_calling import replace_calls

CALL = '<function_call>{"name": "t", "args": {}}</function_call>'


@pytest.mark.parametrize(
    ("text", "folded"),
    [
        pytest.param("no calls here", "no calls here", id="none"),
        pytest.param(f"a {CALL} b {CALL} c", "a [tool call] b [tool call] c", id="two"),
        pytest.param(
            '<function_call>{"name": "w", "args": {"code": __PAYLOAD_START__\nx = "</function_call>"\n'
            "__PAYLOAD_END__}}</function_call> after",
            "[tool call] after",
            id="payload-with-closing-tag",
        ),
        pytest.param(
            '<function_call>{"name": "w", "args": {"s": "</function_call> inside"}}</function_call> after',
            "[tool call] after",
            id="string-with-closing-tag",
        ),
        pytest.param('before <function_call>{"name": "w"', "before [tool call]", id="unclosed"),
        pytest.param(f"<think>{CALL}</think> kept", f"<think>{CALL}</think> kept", id="thinking-is-no-call"),
    ],
)
def test_replace_calls(text: str, folded: str) -> None:
    assert replace_calls(text) == folded
