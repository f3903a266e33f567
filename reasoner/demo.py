"""The offline demo: two real tools and a rule-following model that needs no API key.

When no model is configured, tandem uses ``demo_model(role)`` and says so. It understands two
kinds of goal: counting the words of quoted text and arithmetic (``... times 12``,
``(17 * 23) + 4``). It plans, calls the tools, reads their results and delivers, through the very
same prompts, parsers, tool runner and queues as a real model.
"""

from __future__ import annotations

import ast
import json
import operator
import re
from typing import Any

from tandem.reasoner.models.model_service import ChatMessage
from tandem.reasoner.testing import ScriptedModelService
from tandem.toolkit.tool import Tool

DEMO_GOAL = (
    "How many words are in 'tandem runs reasoning jobs on celery workers', and what is that number times 12?"
)
DEMO_MODEL_NAME = "tandem-demo (offline)"

_OPS: dict[type, Any] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def _evaluate(node: ast.AST) -> float | int:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and (abs(right) > 64 or abs(left) > 2**64):
            raise ValueError("powers are limited to bases up to 2**64 and exponents up to 64")
        return _OPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_evaluate(node.operand))
    raise ValueError(f"unsupported element {ast.dump(node)[:40]!r}: use numbers and + - * / // % **")


def calculate(expression: str) -> float | int:
    """Evaluate an arithmetic expression exactly as written.

    Args:
        expression: numbers, parentheses and the operators + - * / // % **, e.g. "(17 * 23) + 4".
    """
    result = _evaluate(ast.parse(expression, mode="eval"))
    return int(result) if isinstance(result, float) and result.is_integer() else result


def word_count(text: str) -> int:
    """Count the words (runs of non-space characters) in a text.

    Args:
        text: the text to count.
    """
    return len(text.split())


def demo_tools() -> list[Tool]:
    """The demo's tools: ``calculate`` and ``word_count``."""
    return [Tool.from_function(calculate), Tool.from_function(word_count)]


# -- the rule-following model -------------------------------------------------------------------

_QUOTED = re.compile(r"'([^']+)'|\"([^\"]+)\"")
_FOLLOW_OP = re.compile(r"\b(times|multiplied by|plus|minus|divided by)\s+(-?\d+(?:\.\d+)?)", re.I)
_EXPRESSION = re.compile(r"[\(\d][\d\s.+\-*/()%]*[\d)]")
_RESULT = re.compile(
    r"<function_call_result>\s*call \d+: (\w+)\((.*?)\)\s*status: (\w+)"
    r".*?output:\n(.*?)\n</function_call_result>",
    re.S,
)
_SYMBOL = {"times": "*", "multiplied by": "*", "plus": "+", "minus": "-", "divided by": "/"}


def _goal(messages: list[ChatMessage]) -> str:
    match = re.search(r"<goal>(.*?)</goal>", str(messages[0]["content"]), re.S) if messages else None
    return match.group(1) if match else ""


def _results(messages: list[ChatMessage]) -> list[tuple[str, str, str]]:
    text = "\n".join(str(m.get("content") or "") for m in messages)
    return [(name, status, output.strip()) for name, _args, status, output in _RESULT.findall(text)]


def _plan(goal: str, results: list[tuple[str, str, str]]) -> tuple[dict[str, Any] | None, list[str]]:
    """The next tool call the goal needs (or None when done) and the facts found so far."""
    facts: list[str] = []
    done = [r for r in results if r[1] == "succeeded"]
    quoted = [a or b for a, b in _QUOTED.findall(goal)]
    counts = [r for r in done if r[0] == "word_count"]
    for text, result in zip(quoted, counts, strict=False):
        facts.append(f"'{text}' has {result[2]} words")
    if len(counts) < len(quoted):
        return {"tool": "word_count", "args": {"text": quoted[len(counts)]}}, facts
    calcs = [r for r in done if r[0] == "calculate"]
    follow = _FOLLOW_OP.search(goal)
    if follow and counts:
        expression = f"{counts[-1][2]} {_SYMBOL[follow.group(1).lower()]} {follow.group(2)}"
    else:
        bare = _QUOTED.sub("", goal)
        candidates = [e.strip() for e in _EXPRESSION.findall(bare) if re.search(r"[+\-*/%]", e)]
        expression = candidates[0] if candidates else ""
    if expression:
        if not calcs:
            return {"tool": "calculate", "args": {"expression": expression}}, facts
        facts.append(f"{expression} = {calcs[-1][2]}")
    return None, facts


def _thinker_reply(sys_prompt: str, messages: list[ChatMessage]) -> str:
    goal = _goal(messages)
    results = _results(messages)
    step, facts = _plan(goal, results)
    failed = [r for r in results if r[1] == "failed"]
    thought = f"<think>The goal is: {goal} Known so far: {'; '.join(facts) or 'nothing yet'}.</think>"
    if step is not None:
        return (
            f"{thought}\n<deep_thinking>One fact is still missing; the Actor should get it with "
            f"{step['tool']}.</deep_thinking>\n"
            f"<instruction>Call {step['tool']} with the input below and report its output.</instruction>\n"
            f"<input>{json.dumps(step)}</input>"
        )
    if not facts and not failed:
        facts.append(
            "the offline demo model can only count words in quoted text and do arithmetic; "
            "configure a real model with TANDEM_THINKER_MODEL and TANDEM_ACTOR_MODEL"
        )
    return (
        f"{thought}\n<deep_thinking>Every fact the goal needs is known.</deep_thinking>\n"
        f"<instruction>TASK_DONE. Write the deliverable from these facts.</instruction>\n"
        f"<input>{json.dumps({'facts': facts})}</input>"
    )


def _call_block(step: dict[str, Any]) -> str:
    payload = {"name": step["tool"], "call_objective": "get the missing fact", "args": step["args"]}
    return f"<action>\n<function_call>\n{json.dumps(payload)}\n</function_call>\n</action>"


def _deliverable(goal: str, facts: list[str]) -> str:
    body = "\n".join(f"- {f}" for f in facts) or "- nothing could be established"
    return f"<deliverable>\nGoal: {goal}\nFindings:\n{body}\n</deliverable>"


def _actor_reply(sys_prompt: str, messages: list[ChatMessage]) -> str:
    last = str(messages[-1]["content"]) if messages else ""
    given = re.search(r"<input>(.*?)</input>", last, re.S)
    data = json.loads(given.group(1)) if given else {}
    if "TASK_DONE" in last:
        facts = data.get("facts") or _plan(_goal(messages), _results(messages))[1]
        done = "<shallow_thinking>The Thinker says we are done.</shallow_thinking>"
        return f"{done}\n{_deliverable(_goal(messages), facts)}"
    if "tool" in data:
        return f"<shallow_thinking>I will call {data['tool']}.</shallow_thinking>\n{_call_block(data)}"
    return "<shallow_thinking>No tool is needed.</shallow_thinking>\n<action>Nothing to do.</action>"


def _mono_reply(sys_prompt: str, messages: list[ChatMessage]) -> str:
    goal = _goal(messages)
    results = _results(messages)
    step, facts = _plan(goal, results)
    if step is not None:
        return f"<deep_thinking>I still need {step['tool']}.</deep_thinking>\n{_call_block(step)}"
    if not facts and not any(r[1] == "failed" for r in results):
        # Mono jobs use the Actor role's model settings: that is the variable to set.
        facts.append(
            "the offline demo model can only count words in quoted text and do arithmetic; "
            "configure a real model with TANDEM_ACTOR_MODEL"
        )
    return f"<deep_thinking>I know enough.</deep_thinking>\nTASK_DONE\n{_deliverable(goal, facts)}"


def demo_model(role: str) -> ScriptedModelService:
    """The offline model for ``role``: ``thinker``, ``actor`` or ``mono``."""
    replies = {"thinker": _thinker_reply, "actor": _actor_reply, "mono": _mono_reply}
    if role not in replies:
        raise ValueError(f"demo_model role must be 'thinker', 'actor' or 'mono', got {role!r}")
    # Streamed in small pieces, like a real host, so live displays show tokens arriving.
    return ScriptedModelService(replies[role], name=DEMO_MODEL_NAME, stream_chunk=12, stream_delay=0.002)
