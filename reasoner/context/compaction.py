"""What stands in for the rounds left out of a request: the ``Compactor`` seam.

When a request would pass its role's budget, ``fit_history`` (``tandem.reasoner.context.fitting``)
picks the oldest rounds to leave out, ``LeftOut``, and asks the compactor what the model reads in
their place. ``DropRounds`` (the deterministic default) writes a marker saying what was left out
and keeps the person's answers of those rounds; a summarizer returns a summary of them instead
(``how="summarized"``, ``rounds_summarized``). Either way the stored memory is not changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from tandem.reasoner.messages import FunctionCallStatus, ModelMessage
from tandem.reasoner.questions import ASK_PERSON

__all__ = ["DROP_ROUNDS", "Compaction", "Compactor", "DropRounds", "LeftOut", "StandIn", "person_answers"]


@dataclass(frozen=True)
class LeftOut:
    """Rounds ``first`` to ``last`` (from 0) of a role's view, left out of its request: their
    ``messages`` (a person's own messages are never among them) and the ``tokens`` they took."""

    first: int
    last: int
    messages: Sequence[ModelMessage]
    tokens: int
    role: str
    budget: int


@dataclass(frozen=True)
class StandIn:
    """What the model reads in place of the rounds left out: ``text`` (added to the task, the first
    message), ``how`` they were compacted and how many rounds a summary covers."""

    text: str
    how: Literal["dropped", "summarized"] = "dropped"
    rounds_summarized: int = 0


@dataclass(frozen=True)
class Compaction:
    """One compaction of a role's view, as the ``memory_compacted`` event reports it: in the
    request of ``round``, rounds ``summary_of_rounds`` (first and last, from 0) were ``dropped``
    (a marker stands in for them) or ``summarized`` (a summary entry stands in for them,
    ``rounds_summarized`` rounds); the request's tokens without and with them."""

    round: int
    role: str
    tokens_before: int
    tokens_after: int
    summary_of_rounds: tuple[int, int]
    rounds_summarized: int = 0
    how: str = "dropped"

    @property
    def rounds_dropped(self) -> tuple[int, ...]:
        """``summary_of_rounds`` of a drop (empty for a summary): the event's older field."""
        return self.summary_of_rounds if self.how == "dropped" else ()


class Compactor(Protocol):
    """Decides what stands in for rounds left out of a request (the seam for a summarizer)."""

    def stand_in(self, left_out: LeftOut) -> StandIn:
        """What the model reads in place of ``left_out``."""
        ...


def person_answers(messages: Sequence[ModelMessage]) -> list[str]:
    """The person's answers to ``ask_person`` in ``messages`` (kept when their rounds are not)."""
    kept = []
    for message in messages:
        for result in message.function_results:
            if result.name == ASK_PERSON and result.status == FunctionCallStatus.SUCCEEDED:
                question = result.args.get("question", "")
                kept.append(
                    f"- round {message.round + 1}: asked {question!r}, the person answered: {result.output}"
                )
    return kept


class DropRounds:
    """The deterministic compactor: a marker saying which rounds were left out and how many tokens
    they took; the person's answers to ``ask_person`` in them are kept, quoted in the marker."""

    def stand_in(self, left_out: LeftOut) -> StandIn:
        """The marker of ``left_out``."""
        first, last = left_out.first + 1, left_out.last + 1
        rounds = f"round {first}" if first == last else f"rounds {first}-{last}"
        text = (
            f"[Context note: {rounds} of this conversation ({left_out.tokens:,} tokens) are left out "
            f"here to keep within the model's context of {left_out.budget:,} tokens; the task, the "
            "person's messages and the latest rounds are kept.]"
        )
        answers = person_answers(left_out.messages)
        if answers:
            text += "\n[The person's answers in those rounds:\n" + "\n".join(answers) + "]"
        return StandIn(text)


DROP_ROUNDS = DropRounds()
