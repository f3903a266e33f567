"""Showing a job as it runs: one line or block per event of the job's stream."""

from __future__ import annotations

import re
import sys
from typing import Any, TextIO

from tandem.reasoner.function_calling import extract_tag, strip_thinking


def _short(text: str, limit: int = 400) -> str:
    text = re.sub(r"\s+\n", "\n", text.strip())
    return text if len(text) <= limit else f"{text[:limit]} …[{len(text) - limit} more characters]"


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def render_event(event: dict[str, Any]) -> str:
    """The text shown for one event (empty for events not worth a line)."""
    kind, data = event["type"], event["data"]
    if kind == "job_started":
        spec = data.get("spec", {})
        return f"job started: {spec.get('reasoner', 'dual')} reasoner, up to {spec.get('max_rounds')} rounds"
    if kind == "round_started":
        return f"\n── round {data['round'] + 1} of {data['max_rounds']} " + "─" * 40
    if kind == "model_reply":
        role, content = data["role"], data.get("content", "")
        lines = [f"{role.capitalize()} ({data.get('model') or 'model'}):"]
        if data.get("reasoning"):
            lines.append(_indent("reasoning: " + _short(data["reasoning"], 300)))
        if role == "thinker":
            instruction = extract_tag(content, "instruction")
            given = extract_tag(content, "input")
            lines.append(_indent("instruction: " + _short(instruction or strip_thinking(content))))
            if given:
                lines.append(_indent("input: " + _short(given, 300)))
        else:
            action = extract_tag(content, "action")
            deliverable = extract_tag(content, "deliverable")
            if action:
                lines.append(
                    _indent(
                        "action: "
                        + _short(
                            re.sub(r"<function_call>.*?</function_call>", "[tool call]", action, flags=re.S)
                        )
                    )
                )
            if deliverable is not None:
                lines.append(_indent("(deliverable written)"))
            if not action and deliverable is None:
                lines.append(_indent(_short(strip_thinking(content))))
        return "\n".join(lines)
    if kind == "tool_call":
        args = ", ".join(f"{k}={v!r}" for k, v in (data.get("args") or {}).items())
        return f"  → tool call {data['index']}: {data.get('name')}({_short(args, 200)})"
    if kind == "tool_result":
        return f"  ← result {data['index']} [{data['status']}]: {_short(str(data.get('output', '')), 300)}"
    if kind == "final":
        usage = data.get("usage") or {}
        lines = [
            "\n══ " + f"{data['status'].upper()} after {data.get('rounds', 0)} round(s); "
            f"{usage.get('calls', 0)} model calls, {usage.get('total_tokens', 0)} tokens",
        ]
        if data.get("error"):
            lines.append(f"error: {data['error']}")
        if data.get("deliverable"):
            lines.append("deliverable:\n" + _indent(data["deliverable"].strip(), "  "))
        return "\n".join(lines)
    return ""


def show_events(events: Any, out: TextIO = sys.stdout) -> dict[str, Any] | None:
    """Print every event as it arrives; return the ``final`` event's data."""
    final = None
    for event in events:
        text = render_event(event)
        if text:
            print(text, file=out, flush=True)
        if event["type"] == "final":
            final = event["data"]
    return final
