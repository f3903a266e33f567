"""``fit_history``: the deterministic trim of a role's view before each model call.

Every plan calls it before a model step (``LoopPlan.request``), so the in-process drivers and
the Celery workers trim alike. When the request (``counting``: the sum of its parts) would pass
the role's budget, the oldest rounds are left out of this request's view, as few as make it fit,
and the ``Compactor`` says what stands in for them (``DropRounds``: a marker). Never left out:
the system prompt and tools, the task (goal and context), every message from a person, and the
rounds the step reads as its latest (its own round, and the round before it: the latest
instruction and action, their tool calls and results). When even these do not fit, the step fails
with ``ContextLimitError`` naming the tokens needed and the budget.

The choice depends only on the stored messages, so a step run twice sends the same request; the
stored memory is never changed. The Thinker and the Actor each trim their own view by their own
budget. A ``Compaction`` is reported when the rounds left out differ from the role's previous
request (the first trim, and each time the cut moves on).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tandem.reasoner.context.budget import ContextBudget
from tandem.reasoner.context.compaction import Compaction, Compactor, LeftOut, StandIn
from tandem.reasoner.context.counting import MESSAGE_SLACK, TokenCache, conservative_estimate
from tandem.reasoner.context.summary import stand_in_text, stand_in_tokens, view_history
from tandem.reasoner.errors import ContextLimitError
from tandem.reasoner.messages import ModelMessage

__all__ = ["Fitted", "fit_history", "visible"]

_MARKER_TOKENS = 80
"""Tokens assumed for a stand-in while the cut is chosen (the marker is counted once written)."""


@dataclass(frozen=True)
class Fitted:
    """A request's view, fitted: the ``history`` to build it from, the ``stand_in`` to add to its
    first message (``None``: nothing left out), its counted ``tokens`` and, when the cut moved
    since the role's previous request, the ``compaction`` to report."""

    history: list[ModelMessage]
    tokens: int
    stand_in: StandIn | None = None
    compaction: Compaction | None = None


def visible(history: Sequence[ModelMessage], round_no: int, kind: str) -> list[ModelMessage]:
    """What a model step of ``kind`` in ``round_no`` may show: every earlier round, and of its own
    round the person's messages and (an Actor step) the Thinker's instruction."""
    return [
        m
        for m in history
        if m.round < round_no
        or (m.round == round_no and (m.role == "person" or (kind == "actor" and m.role == "thinker")))
    ]


def _counts(
    shown: Sequence[ModelMessage], fixed: int, round_no: int, budget: ContextBudget, cache: TokenCache
) -> tuple[int, dict[int, int]]:
    """The request's tokens, and those of each round that may be left out (rounds before the one
    before ``round_no``; a person's messages are never left out)."""
    tokenizer = budget.tokenizer
    per_round: dict[int, int] = {}
    total = fixed
    for m in shown:
        tokens = cache.message(tokenizer, m)
        total += tokens
        if m.role != "person" and m.round < round_no - 1:
            per_round[m.round] = per_round.get(m.round, 0) + tokens
    return total, per_round


def _cut(total: int, per_round: dict[int, int], limit: int) -> int | None:
    """The last round to leave out (from the oldest) so that the request fits with a marker of
    ``_MARKER_TOKENS``; ``None`` when it fits whole, or when nothing could make it fit."""
    if total <= limit:
        return None
    need = total + _MARKER_TOKENS
    for r in sorted(per_round):
        need -= per_round[r]
        if need <= limit:
            return r
    return None


def fit_history(
    history: Sequence[ModelMessage],
    *,
    round_no: int,
    kind: str,
    fixed: int,
    budget: ContextBudget,
    cache: TokenCache,
    compactor: Compactor,
    summary: ModelMessage | None = None,
) -> Fitted:
    """The view of model step ``kind`` of ``round_no`` within ``budget`` (see the module
    docstring). ``fixed``: the tokens of the request's parts that are not stored messages (system
    prompt, tools, task). ``summary``: the role's latest summary entry
    (``tandem.reasoner.context.summary``), read in place of the rounds it stands for; the oldest
    of the rounds after it are left out as before when even that does not fit, and the summary
    too (the marker naming its rounds with theirs, reported) when it does not fit beside what is
    always kept. The view never holds summary entries. ``ContextLimitError`` when what is never
    left out does not fit."""
    lead = stand_in_text(summary, history) if summary is not None else ""
    lead_tokens = stand_in_tokens(summary, history)
    fixed += lead_tokens
    originals = history
    history = view_history(history, summary)
    shown = visible(history, round_no, kind)
    total, per_round = _counts(shown, fixed, round_no, budget, cache)
    if total <= budget.limit:
        return Fitted(list(history), total, StandIn(lead, "summarized") if lead else None)
    rounds = sorted(per_round)
    first, left, r = (rounds[0] if rounds else 0), 0, -1
    stand_in, tokens = StandIn(""), total
    for r in rounds:
        left += per_round[r]
        if total - left + _MARKER_TOKENS > budget.limit:
            continue
        out = [m for m in shown if m.role != "person" and first <= m.round <= r]
        stand_in = compactor.stand_in(LeftOut(first, r, out, left, budget.role, budget.limit))
        if lead:
            stand_in = StandIn(f"{lead}\n{stand_in.text}", stand_in.how, stand_in.rounds_summarized)
        tokens = total - left - lead_tokens + conservative_estimate(stand_in.text) + MESSAGE_SLACK
        if tokens <= budget.limit:
            break
    else:
        # Every earlier round is out and the stand-in does not fit beside what is always kept
        # (the summary, if any, goes too): a marker naming every round left out, the summary's
        # included, else a terse one, or none, rather than fail while what is always kept fits.
        kept_only = total - left - lead_tokens
        if kept_only > budget.limit:
            raise _too_big(kept_only, budget, round_no, kind)
        stand_in, tokens = StandIn(""), kept_only
        span = summary.summary if lead and summary is not None else None
        start = span.first if span is not None else first
        end = r if rounds else (span.last if span is not None else -1)
        if rounds or span is not None:
            out = [m for m in originals if m.role not in ("person", "summary") and start <= m.round <= end]
            left_out = LeftOut(start, end, out, left + lead_tokens, budget.role, budget.limit)
            terse = StandIn(f"[Rounds {start + 1} to {end + 1} were left out to fit the context window.]")
            for marker in (compactor.stand_in(left_out), terse):
                marked = kept_only + conservative_estimate(marker.text) + MESSAGE_SLACK
                if marked <= budget.limit:
                    stand_in, tokens = marker, marked
                    break
        if span is not None:
            # the rounds left out now reach the round before the one before the step's own: more
            # than the role's previous request left out, every time
            kept = [m for m in history if m.role == "person" or not first <= m.round <= r]
            report = Compaction(
                round_no, kind, total, tokens, (start, end), stand_in.rounds_summarized, stand_in.how
            )
            return Fitted(kept, tokens, stand_in, report)
    kept = [m for m in history if m.role == "person" or not first <= m.round <= r]
    compaction = None
    before, before_rounds = _counts(visible(history, round_no - 1, kind), fixed, round_no - 1, budget, cache)
    if _cut(before, before_rounds, budget.limit) != _cut(total, per_round, budget.limit):
        compaction = Compaction(
            round_no, kind, total, tokens, (first, r), stand_in.rounds_summarized, stand_in.how
        )
    return Fitted(kept, tokens, stand_in, compaction)


def _too_big(needed: int, budget: ContextBudget, round_no: int, kind: str) -> ContextLimitError:
    role = budget.role.upper()
    return ContextLimitError(
        f"the {kind}'s request in round {round_no + 1} needs {needed:,} tokens with every earlier round "
        f"left out, over {budget.describe()}: what a request always keeps (the system prompt and tools, "
        "the goal and context, the latest instruction, action and tool results, the person's messages) "
        f"does not fit. Give the model a longer context and set {budget.setting} to it, lower "
        f"TANDEM_{role}_MAX_TOKENS, shorten the goal and context, or have the tools return less",
        needed=needed,
        budget=budget.limit,
    )
