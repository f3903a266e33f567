"""Durable compaction: a role's older rounds summarized once, kept in the memory as an entry.

When a role's next request would pass ``at`` (``TANDEM_COMPACT_AT``, ``COMPACT_AT`` by default) of
its budget, the rounds it could leave out (``compaction_due``: every round before the one before
the step's own, not yet summarized) are summarized by a model as a step of their own. The summary
is stored as a ``summary`` entry of the memory (``ModelMessage`` with ``SummaryOf``: the role, the
rounds it stands for, its tokens, ``how``) beside the originals, which stay. Later requests of
that role read the entry's text (``stand_in_text``) in place of those rounds (``view_history``),
and ``fit_history`` still leaves out the oldest of the rest when even that does not fit.

Summaries roll: a new entry reads the previous one's text and the rounds after it (``since`` on),
and stands for every round from the first entry's ``first`` on; so no round is ever read by two
summaries, and a role's request reads one entry. What a summary never replaces: a person's own
messages (never among the rounds read), the person's answers to ``ask_person`` and the artifact
handles of the rounds it stands for (both added to its text from the originals, every request).

When summarizing fails (the model raises, or returns nothing usable: empty, or no shorter than
what it replaces), ``summary_entry`` stores a ``dropped`` entry instead: the previous text and a
marker saying which rounds are left out. The rounds it stands for are then not asked for again.
Everything here is pure: the drivers (``tandem.reasoner.loop.compacting``, ``tandem.tasks.steps
.compact``) call the model and store the entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tandem.reasoner.context.budget import ContextBudget
from tandem.reasoner.context.compaction import person_answers
from tandem.reasoner.context.counting import MESSAGE_SLACK, TokenCache, conservative_estimate, message_text
from tandem.reasoner.function_calling import strip_thinking
from tandem.reasoner.messages import ModelMessage, SummaryOf, Usage
from tandem.reasoner.models.model_service import ChatMessage

__all__ = [
    "COMPACT_AT",
    "SUMMARY_PROMPT",
    "Due",
    "SummaryAsk",
    "compaction_due",
    "latest_summary",
    "request_tokens",
    "stand_in_text",
    "summary_ask",
    "summary_entry",
    "view_history",
]

COMPACT_AT = 0.8
"""The share of a role's budget past which its older rounds are summarized (``TANDEM_COMPACT_AT``)."""

SUMMARY_PROMPT = (
    "You condense the earlier rounds of an agent's work so that it can go on within its model's "
    "context window. Write a faithful, compact summary in plain text: the facts and figures found "
    "(exact numbers, names, identifiers, quotes that matter), what was done and with what result, "
    "what failed and why, the decisions taken, and what is still open. Keep every artifact handle "
    "(such as 'r3-c1-0123456789') with what it holds: the agent reads it again with read_artifact. "
    "Invent nothing, add no advice, and write no more than is needed."
)
"""The system prompt of a summary request."""

_LABELS = {"thinker": "the Thinker", "actor": "the Actor", "tool": "tool results"}
MAX_HANDLES = 12
"""The most artifact handles a summary's stand-in lists from the originals (the latest ones; a
summary is asked to keep the others), so a long job's stand-in does not grow without bound."""
_NOTE = "[Context note: "
"""How a ``dropped`` entry's marker opens (what comes before it is the summary under it)."""
_GOAL_CHARS = 2000
"""The most of the goal a summary request quotes (to say what matters; the goal itself is kept)."""


def latest_summary(history: Sequence[ModelMessage], role: str) -> ModelMessage | None:
    """The summary entry of ``role``'s view that stands for the most rounds, if any."""
    found = [m for m in history if m.role == "summary" and m.summary is not None and m.summary.role == role]
    return max(found, key=lambda m: m.round, default=None)


def view_history(history: Sequence[ModelMessage], summary: ModelMessage | None) -> list[ModelMessage]:
    """``history`` as a request built on ``summary`` reads it: no summary entries, and none of
    the rounds the summary stands for except the person's own messages."""
    last = summary.round if summary is not None else -1
    return [m for m in history if m.role != "summary" and (m.role == "person" or m.round > last)]


def _handles(messages: Sequence[ModelMessage]) -> str:
    """The artifact handles of ``messages``' tool results, the latest ``MAX_HANDLES`` of them."""
    refs = [r.artifact for m in messages if m.role == "tool" for r in m.function_results if r.artifact]
    shown = [f"'{ref.handle}' ({ref.chars:,} characters)" for ref in refs[-MAX_HANDLES:] if ref is not None]
    if not shown:
        return ""
    older = len(refs) - len(shown)
    more = f" (and {older} earlier ones, as the summary names them)" if older > 0 else ""
    return "\n[Artifacts of those rounds, readable with read_artifact: " + ", ".join(shown) + more + "]"


def stand_in_text(summary: ModelMessage, history: Sequence[ModelMessage]) -> str:
    """What a request reads in place of the rounds ``summary`` stands for: its text, then the
    person's answers and the artifact handles of those rounds, taken from the originals in
    ``history`` (so no summary can lose them)."""
    assert summary.summary is not None
    span = summary.summary
    rounds = (
        f"round {span.first + 1}" if span.first == span.last else f"rounds {span.first + 1}-{span.last + 1}"
    )
    if span.how == "summarized":
        text = f"[Summary of {rounds} of this conversation (the originals are not shown):]\n{summary.content}"
    else:
        text = summary.content
    covered = [m for m in history if m.role != "person" and span.first <= m.round <= span.last]
    answers = person_answers(covered)
    if answers:
        text += "\n[The person's answers in those rounds:\n" + "\n".join(answers) + "]"
    return text + _handles(covered)


def stand_in_tokens(summary: ModelMessage | None, history: Sequence[ModelMessage]) -> int:
    """The tokens ``stand_in_text`` may take in a request (0 without a summary)."""
    if summary is None:
        return 0
    return conservative_estimate(stand_in_text(summary, history)) + MESSAGE_SLACK


@dataclass(frozen=True)
class Due:
    """A compaction a role's next request needs: rounds ``since`` to ``last`` of ``role``'s view
    to summarize (the rounds before ``since`` are the previous summary's), for the request of
    ``round`` that counts ``tokens`` as it stands."""

    role: str
    round: int
    since: int
    last: int
    tokens: int
    fixed: int = 0
    """The request's tokens beside the stored messages (to count it again once compacted)."""


def request_tokens(
    history: Sequence[ModelMessage],
    *,
    round_no: int,
    kind: str,
    fixed: int,
    budget: ContextBudget,
    cache: TokenCache,
) -> int:
    """The tokens of model step ``kind``'s request in ``round_no`` read through the role's latest
    summary, before any round is left out: ``fixed`` and the view's stored messages."""
    summary = latest_summary(history, kind)
    view = view_history(history, summary)
    shown = [
        m
        for m in view
        if m.round < round_no
        or (m.round == round_no and (m.role == "person" or (kind == "actor" and m.role == "thinker")))
    ]
    return fixed + stand_in_tokens(summary, history) + cache.messages(budget.tokenizer, shown)


def compaction_due(
    history: Sequence[ModelMessage],
    *,
    round_no: int,
    kind: str,
    fixed: int,
    budget: ContextBudget,
    cache: TokenCache,
    at: float,
) -> Due | None:
    """The compaction model step ``kind`` of ``round_no`` needs before it asks its model: ``None``
    when its request (``fixed`` tokens beside the stored messages, read through the role's latest
    summary) is within ``at`` of ``budget.limit``, when ``at`` is 0 (summaries off), or when no
    round it could leave out is left to summarize. While the request still fits its budget, the
    rounds open to a summary must also take ``1 - at`` of the budget, so that a job whose latest
    rounds alone pass ``at`` does not pay a summary call every round. Depends only on the stored
    messages."""
    if at <= 0:
        return None
    total = request_tokens(history, round_no=round_no, kind=kind, fixed=fixed, budget=budget, cache=cache)
    if total <= at * budget.limit:
        return None
    summary = latest_summary(history, kind)
    done = summary.round if summary is not None else -1
    open_rounds = [
        m for m in history if m.role not in ("person", "summary") and done < m.round < round_no - 1
    ]
    if not open_rounds:
        return None
    worth = cache.messages(budget.tokenizer, open_rounds) >= (1 - at) * budget.limit
    if not worth and total <= budget.limit:
        return None  # it fits as it is, and too little is open to be worth a model call yet
    rounds = sorted({m.round for m in open_rounds})
    return Due(kind, round_no, rounds[0], rounds[-1], total, fixed)


@dataclass(frozen=True)
class SummaryAsk:
    """A summary request: ``sys_prompt`` and ``messages`` to send, the entry it makes (rounds
    ``first`` to ``last`` of ``role``'s view, reading ``since`` on itself), the ``previous``
    entry it builds on, and the tokens the rounds it reads took (``replaced``)."""

    role: str
    round: int
    first: int
    since: int
    last: int
    sys_prompt: str
    messages: list[ChatMessage]
    replaced: int
    previous: ModelMessage | None = None


def _round_text(messages: Sequence[ModelMessage]) -> str:
    lines = [f"Round {messages[0].round + 1}:"]
    for m in messages:
        text = message_text(m) if m.role != "tool" else m.content
        lines.append(f"{_LABELS.get(m.role, m.role)}: {text.strip()}")
    return "\n".join(lines)


def _cut(text: str, tokens: int, budget: ContextBudget) -> str:
    """The longest head of ``text`` within ``tokens`` (by ``budget``'s tokenizer), marked as cut."""
    low, high = 0, len(text)
    while low < high:
        mid = (low + high + 1) // 2
        if budget.tokenizer.count(text[:mid]) <= tokens:
            low = mid
        else:
            high = mid - 1
    return text[:low] + "\n[... the rest of this round is cut: too long to summarize at once]"


def summary_ask(
    goal: str,
    history: Sequence[ModelMessage],
    due: Due,
    budget: ContextBudget | None,
    cache: TokenCache,
) -> SummaryAsk:
    """The request that summarizes ``due``'s rounds: the previous summary's text and the rounds
    from ``due.since`` on, as many as fit the summarizing model's ``budget`` (at least one: a
    round too long alone is cut to fit). Depends only on the stored messages."""
    previous = latest_summary(history, due.role)
    first = previous.summary.first if previous is not None and previous.summary is not None else due.since
    head = f"The agent's goal (for what matters):\n{goal[:_GOAL_CHARS]}\n\n"
    if previous is not None:
        head += f"{stand_in_text(previous, history)}\n\n"
    head += "Summarize the conversation so far, the summary above included, from these rounds on:\n\n"
    rounds: dict[int, list[ModelMessage]] = {}
    for m in history:
        if m.role not in ("person", "summary") and due.since <= m.round <= due.last:
            rounds.setdefault(m.round, []).append(m)
    tokenizer = budget.tokenizer if budget is not None else None
    room = None
    if budget is not None and tokenizer is not None:
        room = (
            budget.limit - cache.text(tokenizer, SUMMARY_PROMPT) - tokenizer.count(head) - 4 * MESSAGE_SLACK
        )
    parts: list[str] = []
    last, replaced = due.since, 0
    for r in sorted(rounds):
        text = _round_text(rounds[r])
        tokens = tokenizer.count(text) if tokenizer is not None else conservative_estimate(text)
        if room is not None and budget is not None and tokens > room:
            if not parts:  # the first round alone is too long: cut, so that compaction moves on
                parts.append(_cut(text, max(room, 0), budget))
                last, replaced = r, replaced + cache.messages(budget.tokenizer, rounds[r])
            break
        parts.append(text)
        last = r
        replaced += cache.messages(tokenizer, rounds[r]) if tokenizer is not None else tokens
        if room is not None:
            room -= tokens
    if previous is not None and tokenizer is not None:
        replaced += tokenizer.count(stand_in_text(previous, history))
    content = head + "\n\n".join(parts)
    return SummaryAsk(
        due.role,
        due.round,
        first,
        due.since,
        last,
        SUMMARY_PROMPT,
        [{"role": "user", "content": content}],
        replaced,
        previous,
    )


def summary_entry(
    ask: SummaryAsk, reply: ModelMessage | None, failure: str = "", *, usage: Usage | None = None
) -> ModelMessage:
    """The entry ``ask`` stores: a ``summarized`` one holding ``reply``'s visible text when it is
    usable (not empty, shorter than what it replaces), else a ``dropped`` one: the last summary's
    text under it, then one marker saying which rounds after it are left out and why
    (``failure``, or what was wrong with the reply), so failures in a row never pile up markers.
    ``usage``: the summary call's, counted with the job's (a failed call's too)."""
    text = strip_thinking(reply.content).strip() if reply is not None else ""
    tokens = conservative_estimate(text)
    spent = usage if usage is not None else (reply.usage if reply is not None else Usage())
    model = reply.model if reply is not None else None
    span = {"role": ask.role, "first": ask.first, "last": ask.last, "since": ask.since}
    if text and tokens < ask.replaced:
        summarized = SummaryOf.model_validate({**span, "tokens": tokens, "summarized_to": ask.last})
        return ModelMessage(
            role="summary", round=ask.last, content=text, summary=summarized, usage=spent, model=model
        )
    why = failure or (
        "the summary came back empty" if not text else "the summary was no shorter than the rounds"
    )
    base, summarized_to = "", -1
    previous = ask.previous.summary if ask.previous is not None else None
    if ask.previous is not None and previous is not None:
        summarized_to = previous.summarized_to
        if previous.how == "summarized":
            base = stand_in_text(ask.previous, []) + "\n"
        else:
            base = ask.previous.content.split(_NOTE, 1)[0]
    since = summarized_to + 1
    rounds = f"round {since + 1}" if since == ask.last else f"rounds {since + 1}-{ask.last + 1}"
    marker = (
        f"{base}{_NOTE}{rounds} of this conversation are left out here to keep within the model's "
        f"context ({why}); the task, the person's messages and the latest rounds are kept.]"
    )
    dropped = SummaryOf.model_validate(
        {**span, "tokens": conservative_estimate(marker), "how": "dropped", "summarized_to": summarized_to}
    )
    return ModelMessage(
        role="summary", round=ask.last, content=marker, summary=dropped, usage=spent, model=model
    )
