"""The CLI's summary of an Actor's action when a call's payload holds the function-call tags: the
call is folded whole and counted once (the regex it used cut the block at the payload's tag)."""

from __future__ import annotations

from tandem.tasks.job_events import ModelReply
from tandem.workers.display import render_event

ACTION = (
    "<action>Writing the file.\n<function_call>\n"
    '{"name": "write_file", "call_objective": "save it", "args": {"path": "t.py", "code": __PAYLOAD_START__\n'
    'print("<function_call> and </function_call>")\n'
    "__PAYLOAD_END__}}\n</function_call>\nThen I run it.</action>"
)


def _reply(content: str) -> ModelReply:
    return ModelReply(round=0, role="actor", model="m", content=content)


def test_a_payload_holding_the_closing_tag_does_not_cut_the_summary() -> None:
    text = render_event(_reply(ACTION))
    assert text.splitlines() == [
        "Actor (m):",
        "    action: Writing the file.",
        "    [tool call]",
        "    Then I run it.",
    ]


def test_a_streamed_reply_counts_a_call_whose_payload_holds_the_tags_once() -> None:
    assert render_event(_reply(ACTION), streamed=True).strip() == "(1 tool call(s))"
