"""Errors raised by the reasoning core.

The tree::

    ReasonerError                 root of everything raised by ``reasoner``
    ├── ConfigurationError        a developer's mistake: bad settings, unknown parser, bad tool
    ├── ModelCallError            a model host failed; ``model`` and ``api_base`` name it
    │   └── TransientModelError   the failure may pass (429, 5xx, timeout); retried before it escapes
    ├── MemoryLimitError          a run's conversation grew past ``Task.max_memory_bytes``
    ├── ContextLimitError         what a request must keep does not fit its role's context budget
    └── ApprovalError             decisions on tool calls awaiting approval are unusable

Errors of tools and toolkits have their own root, ``tandem.toolkit.errors.ToolkitError``.

Tool failures at run time are not exceptions for the caller: they become FAILED
``FunctionCallResult`` entries that the model reads and acts on.
"""

from __future__ import annotations


class ReasonerError(Exception):
    """Root of every error raised by ``reasoner``."""


class ConfigurationError(ReasonerError):
    """A setting, argument or definition given by the developer is wrong."""


class ModelCallError(ReasonerError):
    """A call to a model host failed and will not be retried."""

    def __init__(
        self,
        message: str,
        *,
        model: str = "",
        api_base: str | None = None,
        status_code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.model = model
        self.api_base = api_base
        self.status_code = status_code


class TransientModelError(ModelCallError):
    """A model call failed in a way that may pass: rate limit, server error, timeout, connection."""

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: object) -> None:
        super().__init__(message, **kwargs)  # type: ignore[arg-type]
        self.retry_after = retry_after


class MemoryLimitError(ReasonerError):
    """The conversation grew past ``Task.max_memory_bytes``: the run stops, its memory is kept."""


class ContextLimitError(ReasonerError):
    """A model request cannot fit its role's context budget even with every earlier round left
    out: ``needed`` tokens, over ``budget`` (both named in the message, with what to change)."""

    def __init__(self, message: str, *, needed: int, budget: int) -> None:
        super().__init__(message)
        self.needed = needed
        self.budget = budget


class ApprovalError(ReasonerError):
    """Decisions on calls awaiting approval cannot be applied (unknown call, bad edited args, ...).

    Nothing was decided: either every decision of a batch applies or none does.
    """
