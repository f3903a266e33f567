from __future__ import annotations

from typing import Annotated

from tandem import toolkit
from tandem.toolkit import Tool, ToolCallContext


def test_every_export_resolves() -> None:
    for name in toolkit.__all__:
        assert getattr(toolkit, name) is not None, name
    assert sorted(toolkit.__all__) == toolkit.__all__


def test_optional_annotated_context_is_injected() -> None:
    def fn(x: int, ctx: Annotated[ToolCallContext, "the call"] | None = None) -> str:
        return f"{x}:{ctx.job_id if ctx else '-'}"

    made = Tool.from_function(fn)
    assert list(made.injected) == ["ctx"]
    assert list(made.parameters["properties"]) == ["x"]
    assert made.invoke({"x": 1}, context=ToolCallContext(job_id="j")) == "1:j"
