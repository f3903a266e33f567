"""``ContextBudget``: how many tokens a role's request may take, and how they are counted.

A role's window is, in this order: the setting (``TANDEM_<ROLE>_CONTEXT_TOKENS``, or
``context_tokens=`` of a model service), what its host reports (``tandem.reasoner.context.window``),
LiteLLM's model map; with none of them the role has no budget and requests are sent as they are.
Part of the window is kept for the reply (``reserve``): the reply's cap when it is set
explicitly (``TANDEM_<ROLE>_MAX_TOKENS``, ``reply_reserve=``), else the model's ``max_tokens``
up to a quarter of the window. A request's prompt may take ``limit`` = window less reserve.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from tandem.reasoner.context.counting import ESTIMATE, CountingTokenizer, Tokenizer
from tandem.reasoner.context.window import host_window, model_map_window
from tandem.reasoner.errors import ConfigurationError

if TYPE_CHECKING:
    from tandem.reasoner.models.token_count import TokenCounter

__all__ = [
    "RESERVE_SHARE",
    "BudgetSource",
    "ContextBudget",
    "LazyBudget",
    "budget_of",
    "find_budget",
    "make_budget",
    "reply_cap",
]

BudgetSource = Literal["setting", "host", "model map"]
"""Where a role's window came from."""

RESERVE_SHARE = 4
"""Without an explicit reply cap, at most a ``1/RESERVE_SHARE`` of the window is kept for the reply."""


@dataclass(frozen=True)
class ContextBudget:
    """A role's context: ``window`` tokens, of which ``reserve`` are kept for the reply; tokens
    counted by ``tokenizer``. ``role`` and ``setting`` name it in errors."""

    window: int
    reserve: int
    source: BudgetSource
    tokenizer: Tokenizer = field(default=ESTIMATE, compare=False)
    role: str = "actor"

    @property
    def limit(self) -> int:
        """The tokens a request's prompt may take: ``window - reserve``."""
        return self.window - self.reserve

    @property
    def setting(self) -> str:
        """The variable that sets this role's window."""
        return f"TANDEM_{self.role.upper()}_CONTEXT_TOKENS"

    def describe(self) -> str:
        """The budget in words, for errors: the limit, the window, where it came from."""
        source = {"setting": self.setting, "host": "as its host reports", "model map": "LiteLLM's model map"}
        return (
            f"the {self.role}'s context budget of {self.limit:,} tokens (a {self.window:,}-token window, "
            f"{source[self.source]}, less {self.reserve:,} kept for the reply)"
        )


def make_budget(
    window: int | None,
    source: BudgetSource,
    *,
    max_tokens: int | None = None,
    reply_reserve: int | None = None,
    tokenizer: Tokenizer = ESTIMATE,
    role: str = "actor",
) -> ContextBudget | None:
    """The budget of a ``window``-token context (``None`` without a window). ``reply_reserve``: the
    tokens kept for the reply, exactly (``ConfigurationError`` when that leaves no room for a
    prompt); else ``max_tokens`` up to a ``1/RESERVE_SHARE`` of the window."""
    if not window:
        return None
    if reply_reserve is not None:
        if reply_reserve >= window:
            raise ConfigurationError(
                f"TANDEM_{role.upper()}_MAX_TOKENS={reply_reserve} leaves no room for a request in the "
                f"{role}'s {window}-token context window: set it well below {window} (a quarter, "
                f"{window // RESERVE_SHARE}, is the default), or give the model a longer context"
            )
        reserve = reply_reserve
    else:
        share = window // RESERVE_SHARE
        reserve = min(max_tokens, share) if max_tokens else share
    return ContextBudget(window, reserve, source, tokenizer, role)


def find_budget(
    model: str,
    api_base: str | None,
    api_key: str | None = None,
    *,
    context_tokens: int | None = None,
    max_tokens: int | None = None,
    reply_reserve: int | None = None,
    tokenizer: Tokenizer = ESTIMATE,
    role: str = "actor",
) -> ContextBudget | None:
    """The budget of LiteLLM model ``model`` at ``api_base``: its window from ``context_tokens``,
    else its host (``host_window``), else LiteLLM's model map (``model_map_window``); ``None``
    when none gives one. The reserve as ``make_budget`` says."""
    source: BudgetSource = "setting"
    window = context_tokens
    if not window:
        source, window = "host", host_window(api_base, model, api_key)
    if not window:
        source, window = "model map", model_map_window(model)
    return make_budget(
        window, source, max_tokens=max_tokens, reply_reserve=reply_reserve, tokenizer=tokenizer, role=role
    )


class LazyBudget:
    """A LiteLLM model's ``context_budget()``: ``find_budget`` on the first call, then kept.

    ``context_tokens``: the model's window in tokens (unset: its host says, else LiteLLM's model
    map, else no budget); ``reply_reserve``: the tokens kept for the reply (unset: ``max_tokens``,
    at most a quarter of the window); tokens counted by the model's or its host's tokenizer
    (``counter``), else estimated. ``ConfigurationError`` when the reserve leaves no room.
    """

    def __init__(
        self,
        counter: TokenCounter,
        context_tokens: int | None = None,
        reply_reserve: int | None = None,
        max_tokens: int | None = None,
        role: str | None = None,
    ) -> None:
        self.counter = counter
        self.context_tokens = context_tokens
        self.reply_reserve = reply_reserve
        self.max_tokens = max_tokens
        self.role = role or "actor"
        self._found: tuple[ContextBudget | None] | None = None
        self._lock = threading.Lock()

    def __call__(self) -> ContextBudget | None:
        """The budget, found once (then read without the lock: every model step asks)."""
        found = self._found
        if found is not None:
            return found[0]
        with self._lock:
            if self._found is None:
                counter = self.counter
                self._found = (
                    find_budget(
                        counter.model,
                        counter.root,
                        counter.api_key,
                        context_tokens=self.context_tokens,
                        max_tokens=self.max_tokens,
                        reply_reserve=self.reply_reserve,
                        tokenizer=CountingTokenizer(counter.tokenizer_name, counter.count_text),
                        role=self.role,
                    ),
                )
            return self._found[0]


def reply_cap(max_tokens: int | None, budget: ContextBudget | None) -> int | None:
    """The ``max_tokens`` a request sends: the role's cap, but never more than the budget keeps for
    the reply (a host such as vLLM refuses a prompt and ``max_tokens`` that together pass its
    window; the budget's reserve is what the prompt left room for)."""
    if budget is None:
        return max_tokens
    return budget.reserve if max_tokens is None else min(max_tokens, budget.reserve)


def budget_of(model: object) -> ContextBudget | None:
    """The context budget of a model service: its ``context_budget()``, when it has one (a model
    wrapper passes on its inner model's); ``None``: no budget, requests go as they are."""
    method = getattr(model, "context_budget", None)
    if not callable(method):
        return None
    found = method()
    return found if isinstance(found, ContextBudget) else None
