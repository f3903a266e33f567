"""The system prompts of the Thinker, the Actor and the single (mono) model, and round notes.

Written for tandem; the roles follow Chat2Graph's dual-model design: the Thinker plans and
instructs and never calls tools, the Actor acts and delivers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tandem.reasoner.function_calling import FUNCTION_CALLING_GUIDE
from tandem.toolkit.tool import Tool

if TYPE_CHECKING:
    from tandem.toolkit.action import Action

TASK_DONE = "TASK_DONE"

THINKER_PROMPT = """\
You are the Thinker in a team of two models. You plan; a second model, the Actor, carries out
your instructions, can call tools, and writes the final deliverable. You never call tools and
never write the deliverable yourself.

Each turn:
1. Think deeply inside <deep_thinking>...</deep_thinking>: what is known, what is missing,
   which hypotheses compete, what the last results (in <function_call_result> blocks) prove or
   refute, and what single next step moves the task forward most.
2. Then write exactly one instruction for the Actor:
   <instruction>what the Actor must do now, concrete and checkable</instruction>
   <input>the facts, values and constraints the Actor needs for it</input>

When the goal is fully met, or when the round budget is nearly spent, write {task_done} inside
the instruction and tell the Actor what the deliverable must contain.

Tools the Actor can use (for your planning; you do not call them):
{tools}
"""

ACTOR_PROMPT = """\
You are the Actor in a team of two models. The Thinker sends you an <instruction> and an
<input>; you carry it out.

Each turn:
1. Think briefly inside <shallow_thinking>...</shallow_thinking>: how to carry out the
   instruction exactly.
2. Act inside <action>...</action>: write the text, analysis or result asked for, and call
   tools when they are needed (format below).
3. When the instruction contains {task_done}, write the final answer for the user inside
   <deliverable>...</deliverable>: the goal, the key findings and reasoning, and the result.
   Write no <deliverable> before that.

{guide}

Tools you can call:
{tools}
{actions}"""

MONO_PROMPT = """\
You solve the task on your own, turn by turn, calling tools when they help.

Each turn:
1. Think deeply inside <deep_thinking>...</deep_thinking>: what is known, what is missing, what
   the last results (in <function_call_result> blocks) show, and the best next step.
2. Act inside <action>...</action>: write what the step needs and call tools (format below).
3. When the goal is met, write {task_done} and then the final answer for the user inside
   <deliverable>...</deliverable>: the goal, the key findings and reasoning, and the result.

{guide}

Tools you can call:
{tools}
{actions}"""


def _tool_list(tools: Sequence[Tool]) -> str:
    if not tools:
        return "(none: answer from your own knowledge)"
    from tandem.toolkit.describe import describe_tools

    return describe_tools(list(tools))


def _action_list(actions: Sequence[Action], graph: object | None) -> str:
    if not actions or graph is None:
        return ""
    from tandem.toolkit.describe import describe_actions

    return "\nThe steps (actions) this task moves through, and where each may lead:\n" + describe_actions(
        graph,  # type: ignore[arg-type]
        list(actions),
    )


def thinker_prompt(tools: Sequence[Tool]) -> str:
    """The Thinker's system prompt."""
    return THINKER_PROMPT.format(task_done=TASK_DONE, tools=_tool_list(tools))


def actor_prompt(tools: Sequence[Tool], actions: Sequence[Action] = (), graph: object | None = None) -> str:
    """The Actor's system prompt, with the recommended tools and actions."""
    return ACTOR_PROMPT.format(
        task_done=TASK_DONE,
        guide=FUNCTION_CALLING_GUIDE,
        tools=_tool_list(tools),
        actions=_action_list(actions, graph),
    )


def mono_prompt(tools: Sequence[Tool], actions: Sequence[Action] = (), graph: object | None = None) -> str:
    """The single model's system prompt (mono reasoner)."""
    return MONO_PROMPT.format(
        task_done=TASK_DONE,
        guide=FUNCTION_CALLING_GUIDE,
        tools=_tool_list(tools),
        actions=_action_list(actions, graph),
    )


def task_text(goal: str, context: str) -> str:
    """The task as the models first read it."""
    text = f"<task>\n<goal>{goal}</goal>"
    if context:
        text += f"\n<context>{context}</context>"
    return text + "\n</task>"


def person_note(text: str) -> str:
    """A message the person who set the task sent into the running job, as the leading model reads
    it (``tandem.message``)."""
    return f"A message from the person who set this task (take it into account from now on):\n{text}"


def round_note(round_no: int, max_rounds: int, role: str) -> str:
    """What every turn tells a model about the budget; the last round asks for the deliverable."""
    left = max_rounds - round_no - 1
    note = (
        f"[Round {round_no + 1} of {max_rounds}; {left} round{'s' if left != 1 else ''} left after this one.]"
    )
    if left == 0:
        if role == "thinker":
            note += f" This is the last round: write {TASK_DONE} and tell the Actor what to deliver."
        else:
            note += " This is the last round: write the <deliverable> now with what you have."
    return note
