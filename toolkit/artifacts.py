"""Artifacts: a tool output too large for the conversation, kept whole beside it.

An output over the artifact threshold (``TANDEM_ARTIFACT_BYTES``) is stored whole under a
*handle*; the model reads a preview (its head) plus the handle and pages through the rest with the
built-in ``read_artifact`` tool (defined with the reasoner); clients read it whole.

A handle is ``r<round>-c<call>-<hash>``: the call that made it and the first 10 hex digits of the
SHA-256 of its text. It is derived from the content, so a call run twice that returns the same
text stores one artifact, and one that returns another text (a tool that is not deterministic,
run again after a lost worker) stores another one under another handle: a stored preview never
points at a text other than its own. Handles use ``[a-z0-9-]`` only (safe in a URL path).

Storing is part of the job's memory: every ``put`` counts the artifact's bytes against the job's
memory limit (its conversation and its artifacts together), and one that would pass it is refused
(``put`` returns ``None``): the output is then cut as any output is, saying why.

``ArtifactStore`` is the seam: ``InMemoryArtifactStore`` here (in-process runs, tests), and
``tandem.tasks.state.artifacts.RedisArtifactStore`` in the job's Redis keys (workers).
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from pydantic import BaseModel

__all__ = [
    "HANDLE_PATTERN",
    "ArtifactPage",
    "ArtifactRef",
    "ArtifactStore",
    "InMemoryArtifactStore",
    "artifact_handle",
    "text_bytes",
]

_SURROGATE = re.compile("[\ud800-\udfff]")

HANDLE_PATTERN = re.compile(r"r\d{1,9}-c\d{1,6}-[0-9a-f]{10}")
"""What a handle looks like (``artifact_handle``)."""


class ArtifactRef(BaseModel):
    """What a tool result says of the artifact holding its whole output: the ``handle``, and the
    text's length in characters and in bytes (UTF-8)."""

    handle: str
    chars: int
    bytes: int


class ArtifactPage(BaseModel):
    """A part of an artifact: ``text`` from character ``offset`` on, of ``total`` characters."""

    handle: str
    offset: int
    text: str
    total: int

    @property
    def end(self) -> int:
        """The offset just past this page."""
        return self.offset + len(self.text)


def text_bytes(text: str) -> int:
    """The size of ``text`` in UTF-8 bytes (what Redis stores, what the memory limit counts)."""
    return len(text.encode("utf-8", "surrogatepass"))


def storable(text: str) -> str:
    """``text`` as it can be stored and read back as UTF-8: a lone surrogate (never valid UTF-8)
    becomes U+FFFD; every other text is unchanged."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)


def artifact_handle(round_no: int, index: int, text: str) -> str:
    """The handle of ``text``, the output of call ``index`` of ``round_no`` (see the module docstring)."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"r{max(round_no, 0)}-c{max(index, 0)}-{digest}"


@runtime_checkable
class ArtifactStore(Protocol):
    """The artifacts of one job. Writes are idempotent: a handle is written once."""

    def put(self, handle: str, text: str, *, limit: int | None = None) -> ArtifactRef | None:
        """Store ``text`` under ``handle`` unless it is stored already; the stored artifact's
        ``ArtifactRef``, or ``None`` when storing it would bring the job's memory (conversation and
        artifacts) over ``limit`` bytes (``None``: no limit)."""
        ...

    def get(self, handle: str) -> str | None:
        """The whole text stored under ``handle``, or ``None`` for a handle this job does not hold."""
        ...

    def total_bytes(self) -> int:
        """The bytes of every artifact of the job (what they add to its memory)."""
        ...


class InMemoryArtifactStore:
    """A job's artifacts in a dict, for in-process runs and tests. ``memory_bytes``: the size of
    the job's conversation (JSON bytes), counted with the artifacts against a ``put``'s limit."""

    def __init__(self, memory_bytes: Callable[[], int] | None = None) -> None:
        self._texts: dict[str, str] = {}
        self._bytes = 0
        self._lock = threading.Lock()
        self._memory_bytes = memory_bytes

    def put(self, handle: str, text: str, *, limit: int | None = None) -> ArtifactRef | None:
        """Store ``text`` under ``handle`` (see ``ArtifactStore.put``)."""
        text = storable(text)
        size = text_bytes(text)
        with self._lock:
            stored = self._texts.get(handle)
            if stored is not None:
                return ArtifactRef(handle=handle, chars=len(stored), bytes=text_bytes(stored))
            if limit:
                used = self._bytes + (self._memory_bytes() if self._memory_bytes else 0)
                if used + size > limit:
                    return None
            self._texts[handle] = text
            self._bytes += size
        return ArtifactRef(handle=handle, chars=len(text), bytes=size)

    def get(self, handle: str) -> str | None:
        """The whole text under ``handle``, or ``None``."""
        return self._texts.get(handle)

    def total_bytes(self) -> int:
        """The bytes of every artifact."""
        return self._bytes

    def handles(self) -> list[str]:
        """The handles stored, oldest first."""
        return list(self._texts)
