"""Large tool outputs by reference: the preview the model reads, and the built-in ``read_artifact``.

A tool output over the artifact threshold (``ToolRunner.artifact_bytes``, ``TANDEM_ARTIFACT_BYTES``)
is kept whole in the job's artifacts (``tandem.toolkit.artifacts``) and the model reads a preview:
its head (``preview_chars`` characters), then one line naming the handle, the total size and how
to read on. The model reads on with ``read_artifact(handle, offset, length)``: at most one page
(``TANDEM_MAX_OUTPUT_CHARS`` characters) per call, each page saying where the next one starts.

The tool is offered with the job's other tools from the first model step whose memory holds an
artifact (``offer_reader``), so a job that never made one pays no prompt tokens for it; a call
to it runs in any step of a job that keeps artifacts. A tool of the job's own named
``read_artifact`` wins over the built-in one.

Both drivers use it: in process, the reasoner keeps the run's artifacts with its memory
(``InMemoryReasonerMemory.artifacts``) and binds them to the tool calls through ``keeping``; on
workers, the tool step binds the job's Redis artifacts (``tandem.tasks.state.artifacts``).
Nothing here imports Celery.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from tandem.reasoner.messages import ModelMessage
from tandem.toolkit.artifacts import ArtifactPage, ArtifactRef, ArtifactStore
from tandem.toolkit.context import ToolCallContext
from tandem.toolkit.errors import ArtifactError
from tandem.toolkit.tool import Tool

if TYPE_CHECKING:
    from tandem.reasoner.loop.step import StepInputs

__all__ = [
    "READ_ARTIFACT",
    "artifacts_of",
    "bind_current",
    "current_keeping",
    "has_artifacts",
    "keeping",
    "kept_bytes",
    "offer_reader",
    "page_of",
    "preview",
    "read_artifact",
    "read_artifact_tool",
    "with_reader",
]

READ_ARTIFACT = "read_artifact"
"""The name of the built-in tool that pages through an artifact."""


@dataclasses.dataclass(frozen=True)
class Keeping:
    """Where an in-process run keeps its artifacts: the store, the job's memory limit (bytes) and
    the most characters of one page."""

    store: ArtifactStore
    limit: int | None
    page_chars: int


_current: ContextVar[Keeping | None] = ContextVar("tandem_artifacts", default=None)


@contextlib.contextmanager
def keeping(store: ArtifactStore | None, limit: int | None, page_chars: int) -> Iterator[None]:
    """Within the block, tool contexts built for the run keep large outputs in ``store``
    (``None``: they keep none)."""
    token = _current.set(None if store is None else Keeping(store, limit, page_chars))
    try:
        yield
    finally:
        _current.reset(token)


def current_keeping() -> Keeping | None:
    """Where the in-process run in progress in this context keeps its artifacts, if anywhere."""
    return _current.get()


def bind_current(ctx: ToolCallContext) -> ToolCallContext:
    """``ctx`` bound to the current run's artifacts (``keeping``), when it keeps any."""
    kept = _current.get()
    if kept is None:
        return ctx
    return ctx.bind_artifacts(kept.store, limit=kept.limit, page_chars=kept.page_chars)


def preview(text: str, ref: ArtifactRef, preview_chars: int, page_chars: int) -> str:
    """What the model reads of an output kept as artifact ``ref``: its first ``preview_chars``
    characters, then one line with the handle, the total size and how to read on."""
    shown = text[: max(preview_chars, 0)]
    return (
        f"{shown}\n[output kept as artifact {ref.handle!r}: {ref.chars} characters ({ref.bytes} bytes) in "
        f"all, the first {len(shown)} shown above. Read more with read_artifact(handle={ref.handle!r}, "
        f"offset={len(shown)}, length={page_chars}).]"
    )


def page_of(
    store: ArtifactStore | None, handle: Any, offset: Any, length: Any, page_chars: int
) -> ArtifactPage:
    """Characters ``offset`` to ``offset + length`` of artifact ``handle`` (``length`` 0, or more
    than ``page_chars``: ``page_chars``); ``ArtifactError`` saying what to ask instead for a run
    without artifacts, an unknown handle, or an offset past the end."""
    if store is None:
        raise ArtifactError("this run keeps no artifacts: there is nothing to read; use the outputs as shown")
    if not isinstance(handle, str) or not handle:
        raise ArtifactError(f"handle must be the artifact's handle as a tool result named it, got {handle!r}")
    text = store.get(handle)
    if text is None:
        raise ArtifactError(
            f"no artifact {handle!r} in this job: use a handle exactly as a tool result named it "
            "(like 'r2-c1-0123456789')"
        )
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ArtifactError(f"offset must be a whole number of characters from 0, got {offset!r}")
    if offset >= len(text) and not (offset == 0 and not text):
        raise ArtifactError(
            f"offset {offset} is past the end of artifact {handle!r}, which has {len(text)} characters: "
            f"read from an offset below {len(text)}"
        )
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise ArtifactError(f"length must be a whole number of characters (0: one page), got {length!r}")
    size = page_chars if length == 0 else min(length, page_chars)
    return ArtifactPage(handle=handle, offset=offset, text=text[offset : offset + size], total=len(text))


FRAME_CHARS = 240
"""Room kept in a page for ``read_artifact``'s frame (its first and last lines; a handle is
short), so that a page and its frame together stay within one tool output's characters."""


def read_artifact(handle: str, offset: int = 0, length: int = 0, *, context: ToolCallContext) -> str:
    """Read part of a large tool output that was kept as an artifact (a tool result names its
    handle and size). Returns the characters from offset on, and where the next part starts.

    Args:
        handle: the artifact's handle, exactly as the tool result named it
        offset: the first character to read, from 0
        length: how many characters to read; 0 reads one page (the most one call returns)
    """
    # The frame's two lines come out of the page, so the whole answer fits one tool output.
    page = page_of(context.artifacts, handle, offset, length, max(context.page_chars - FRAME_CHARS, 1))
    head = f"[artifact {page.handle!r}: characters {page.offset} to {page.end} of {page.total}]"
    tail = (
        f"[more: read_artifact(handle={page.handle!r}, offset={page.end})]"
        if page.end < page.total
        else "[end of the artifact]"
    )
    return f"{head}\n{page.text}\n{tail}"


_TOOL: Tool | None = None


def read_artifact_tool() -> Tool:
    """The built-in ``read_artifact`` tool (one instance per process)."""
    global _TOOL
    if _TOOL is None:
        _TOOL = Tool.from_function(read_artifact, name=READ_ARTIFACT)
    return _TOOL


def has_artifacts(messages: Sequence[ModelMessage]) -> bool:
    """True when a tool result among ``messages`` was kept as an artifact."""
    return any(r.artifact is not None for m in messages if m.role == "tool" for r in m.function_results)


def artifacts_of(memory: Any) -> ArtifactStore | None:
    """The artifacts a job's memory carries (``memory.artifacts``), or ``None``."""
    store = getattr(memory, "artifacts", None)
    return store if isinstance(store, ArtifactStore) else None


def kept_bytes(memory: Any, history: Sequence[ModelMessage]) -> int:
    """What the job's artifacts add to its memory, in bytes: 0 (and no read) while ``history``
    names none."""
    if not has_artifacts(history):  # first: the store's check is a runtime Protocol's isinstance
        return 0
    store = artifacts_of(memory)
    return 0 if store is None else store.total_bytes()


def with_reader(tools: Sequence[Tool]) -> list[Tool]:
    """``tools`` and the built-in ``read_artifact`` (unless a tool of that name is among them)."""
    if any(t.name == READ_ARTIFACT for t in tools):
        return list(tools)
    return [*tools, read_artifact_tool()]


def offer_reader(inputs: StepInputs) -> StepInputs:
    """``inputs`` with ``read_artifact`` among its tools once its memory holds an artifact (and
    unchanged before)."""
    if any(t.name == READ_ARTIFACT for t in inputs.tools):
        return inputs
    if not has_artifacts(inputs.memory.get_messages()):
        return inputs
    return dataclasses.replace(inputs, tools=with_reader(inputs.tools))
