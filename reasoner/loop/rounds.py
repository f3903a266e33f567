"""The round plans: ``DualPlan`` (a Thinker, then an Actor, every round) and ``MonoPlan`` (one model).

A round is the Thinker's turn (dual only), then the Actor's. The Actor's reply decides the rest:
a ``<deliverable>`` (outside thinking sections) ends the run; tool calls run, unless this was the
last round, which ends the run ``truncated``; otherwise the next round starts. ``Task.max_rounds``
is the round budget.

Each model reads the memory through its own view: the Thinker sees the Actor's visible replies
and the tool results as user text; the Actor sees the Thinker's ``<instruction>``/``<input>``,
its own earlier replies and the results. Consecutive messages of one role are joined, since strict
chat templates want them alternating. Reasoning never goes back to a model.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence

from tandem.reasoner.function_calling import ParsedFunctionCall, extract_tag, strip_thinking
from tandem.reasoner.loop.calls import calls_of
from tandem.reasoner.loop.plan import LoopPlan
from tandem.reasoner.loop.step import ModelRole, Step, StepInputs, finalize
from tandem.reasoner.memory import ReasonerMemory
from tandem.reasoner.messages import FunctionCallResult, ModelMessage
from tandem.reasoner.models.model_service import ChatMessage
from tandem.reasoner.prompts import (
    actor_prompt,
    mono_prompt,
    person_note,
    round_note,
    task_text,
    thinker_prompt,
)
from tandem.reasoner.task import Task

__all__ = ["DualPlan", "MonoPlan", "RoundPlan", "delivered", "merge_turns"]

TRUNCATED = "the round budget (max_rounds) ran out before the Actor wrote a <deliverable>"


def delivered(message: ModelMessage) -> bool:
    """True when the reply holds a ``<deliverable>`` outside thinking sections: the run ends."""
    return extract_tag(message.content, "deliverable") is not None


def merge_turns(messages: list[ChatMessage]) -> list[ChatMessage]:
    """Join consecutive messages of the same role: strict chat templates want them alternating."""
    merged: list[ChatMessage] = []
    for m in messages:
        if merged and merged[-1]["role"] == m["role"]:
            merged[-1] = {"role": m["role"], "content": f"{merged[-1]['content']}\n\n{m['content']}"}
        else:
            merged.append(dict(m))
    return merged


def _instruction_text(content: str) -> str:
    instruction = extract_tag(content, "instruction")
    if instruction is None:
        return strip_thinking(content).strip()
    text = f"<instruction>{instruction}</instruction>"
    given = extract_tag(content, "input")
    if given:
        text += f"\n<input>{given}</input>"
    return text


def _actor_turns(
    task: Task, history: Sequence[ModelMessage], round_no: int, *, leads: bool = False
) -> list[ChatMessage]:
    """The Actor's view up to its turn in ``round_no``, unmerged: the round note goes right before
    the instruction of ``round_no`` (so the mono model, which has none, gets no note here).
    ``leads``: the Actor is the job's leading model (mono) and reads the person's messages; in a
    dual job the Thinker reads them and passes on what matters."""
    chat: list[ChatMessage] = [{"role": "user", "content": task_text(task.goal, task.context)}]
    for m in history:
        if m.round > round_no or (m.round == round_no and m.role not in ("thinker", "person")):
            break
        if m.role == "person":
            if leads:
                chat.append({"role": "user", "content": person_note(m.content)})
        elif m.role == "thinker":
            if m.round == round_no:
                chat.append({"role": "user", "content": round_note(round_no, task.max_rounds, "actor")})
            chat.append(
                {"role": "user", "content": f"The Thinker's instruction:\n{_instruction_text(m.content)}"}
            )
        elif m.role == "actor":
            chat.append({"role": "assistant", "content": m.content})
        else:
            chat.append({"role": "user", "content": m.content})
    return chat


class RoundPlan(LoopPlan):
    """What dual and mono share: the Actor's reply decides, ``Task.max_rounds`` bounds the rounds,
    calls are native ``tool_calls`` or ``<function_call>`` blocks, and the answer is the last
    Actor reply's ``<deliverable>``."""

    @abstractmethod
    def prompt(self, step: Step, inputs: StepInputs) -> str:
        """The system prompt of model step ``step``."""

    @abstractmethod
    def actor_view(self, task: Task, history: Sequence[ModelMessage], round_no: int) -> list[ChatMessage]:
        """The conversation as the Actor (or the mono model) sees it before its turn in ``round_no``."""

    def view(self, step: Step, task: Task, history: Sequence[ModelMessage]) -> list[ChatMessage]:
        """The conversation model step ``step`` reads."""
        return self.actor_view(task, history, step.round)

    def model(self, role: ModelRole) -> tuple[ModelRole, str]:
        """The Thinker's or the Actor's model (the demo script follows the kind)."""
        return role, self.kind

    def rounds(self, task: Task) -> int:
        """``task.max_rounds``."""
        return task.max_rounds

    def system_prompt(self, step: Step, inputs: StepInputs) -> str:
        """The step's ``prompt`` (no native tools: it describes them)."""
        return self.prompt(step, inputs)

    def chat(self, step: Step, task: Task, history: Sequence[ModelMessage]) -> list[ChatMessage]:
        """The step's ``view``."""
        return self.view(step, task, history)

    def after_model(self, step: Step, reply: ModelMessage, task: Task) -> Step:
        """The Thinker hands over to the Actor. After the Actor: a deliverable ends the run, the
        last round ends it ``truncated``, calls go to the ``tools`` step, else the next round."""
        if step.kind == "thinker":
            return Step(step.round, "actor")
        if delivered(reply):
            return finalize(step.round, "completed")
        if step.round + 1 >= task.max_rounds:
            return finalize(step.round, "truncated")
        calls = self.calls_of(reply)
        if calls:
            return Step(step.round, "tools", calls=len(calls))
        return self.opening(step.round + 1)

    def after_tools(self, task: Task, results: Sequence[FunctionCallResult], round_no: int) -> Step:
        """The next round, or ``truncated`` when the rounds are spent."""
        if round_no + 1 >= task.max_rounds:
            return finalize(round_no, "truncated")
        return self.opening(round_no + 1)

    def calls_of(self, reply: ModelMessage) -> list[ParsedFunctionCall]:
        """The reply's native ``tool_calls`` if any, else its ``<function_call>`` blocks."""
        return calls_of(reply)

    def answer(self, memory: ReasonerMemory) -> str:
        """The deliverable of the last Actor reply, or that reply's visible text when it has none."""
        for message in reversed(memory.get_messages()):
            if message.role == "actor":
                found = extract_tag(message.content, "deliverable")
                return found if found is not None else strip_thinking(message.content).strip()
        return ""

    def truncated_error(self) -> str:
        """The rounds ran out."""
        return TRUNCATED


class DualPlan(RoundPlan):
    """Thinker then Actor every round."""

    kind = "dual"

    def opening(self, round_no: int) -> Step:
        """The Thinker's turn."""
        return Step(round_no, "thinker")

    def prompt(self, step: Step, inputs: StepInputs) -> str:
        """The Thinker's prompt (the tools named, never called) or the Actor's (tools, actions)."""
        if step.kind == "thinker":
            return thinker_prompt(inputs.tools)
        return actor_prompt(inputs.tools, inputs.actions, inputs.task.toolkit)

    def view(self, step: Step, task: Task, history: Sequence[ModelMessage]) -> list[ChatMessage]:
        """The Thinker's view for a Thinker step, the Actor's for an Actor step."""
        if step.kind == "thinker":
            return self.thinker_view(task, history, step.round)
        return self.actor_view(task, history, step.round)

    def thinker_view(self, task: Task, history: Sequence[ModelMessage], round_no: int) -> list[ChatMessage]:
        """The conversation as the Thinker sees it before its turn in ``round_no``: its own replies,
        the Actor's visible replies, the results, the person's messages (those of ``round_no``
        too: they open it), then the round note."""
        chat: list[ChatMessage] = [{"role": "user", "content": task_text(task.goal, task.context)}]
        for m in history:
            if m.round > round_no or (m.round == round_no and m.role != "person"):
                break
            if m.role == "person":
                chat.append({"role": "user", "content": person_note(m.content)})
            elif m.role == "thinker":
                chat.append({"role": "assistant", "content": m.content})
            elif m.role == "actor":
                chat.append(
                    {"role": "user", "content": f"The Actor replied:\n{strip_thinking(m.content).strip()}"}
                )
            else:
                chat.append({"role": "user", "content": m.content})
        chat.append({"role": "user", "content": round_note(round_no, task.max_rounds, "thinker")})
        return merge_turns(chat)

    def actor_view(self, task: Task, history: Sequence[ModelMessage], round_no: int) -> list[ChatMessage]:
        """The Actor's view: the round note, then the Thinker's instruction of ``round_no``."""
        return merge_turns(_actor_turns(task, history, round_no))


class MonoPlan(RoundPlan):
    """One model (the Actor role) every round."""

    kind = "mono"

    def opening(self, round_no: int) -> Step:
        """The model's turn."""
        return Step(round_no, "actor")

    def prompt(self, step: Step, inputs: StepInputs) -> str:
        """The mono prompt: think, act and deliver in one reply."""
        return mono_prompt(inputs.tools, inputs.actions, inputs.task.toolkit)

    def actor_view(self, task: Task, history: Sequence[ModelMessage], round_no: int) -> list[ChatMessage]:
        """The model's view: its replies, the results and the person's messages, then the round
        note."""
        chat = _actor_turns(task, history, round_no, leads=True)
        chat.append({"role": "user", "content": round_note(round_no, task.max_rounds, "actor")})
        return merge_turns(chat)
