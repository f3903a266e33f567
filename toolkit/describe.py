"""Prompt text for tools and actions: compact, deterministic, written for the model to read.

``describe_tools`` gives one block per tool (name, description, one line per parameter with
its type, required/optional and default); ``describe_actions`` gives the recommended steps
with their tools and the ``next`` edges among them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tandem.toolkit.action import Action
from tandem.toolkit.graph import Toolkit
from tandem.toolkit.recommend import resolve_actions
from tandem.toolkit.tool import Tool

_MAX_DEPTH = 3


def _one_line(text: str) -> str:
    return " ".join(text.split())


def schema_type(schema: Mapping[str, Any], defs: Mapping[str, Any] | None = None, depth: int = 0) -> str:
    """A short type expression for a JSON schema: ``integer``, ``array of string``, ``'a' | 'b'``…

    ``$ref`` into ``$defs`` is followed; nested objects are shown as ``{x: integer, y?: string}``
    down to a few levels, then as ``object``.
    """
    defs = defs if defs is not None else schema.get("$defs", {})
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        target = defs.get(name) if defs else None
        if target is None or depth >= _MAX_DEPTH:
            return name
        return schema_type(target, defs, depth + 1)
    if "enum" in schema:
        return " | ".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"], ensure_ascii=False)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            parts = [schema_type(s, defs, depth + 1) for s in schema[key]]
            return " | ".join(dict.fromkeys(parts))
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(schema_type({**schema, "type": k}, defs, depth) for k in kind)
    if kind == "array":
        items = schema.get("items")
        return f"array of {schema_type(items, defs, depth + 1)}" if isinstance(items, dict) else "array"
    if kind == "object" or "properties" in schema:
        props = schema.get("properties")
        if props and depth < _MAX_DEPTH:
            required = set(schema.get("required", []))
            inner = ", ".join(
                f"{name}{'' if name in required else '?'}: {schema_type(sub, defs, depth + 1)}"
                for name, sub in props.items()
            )
            return f"{{{inner}}}"
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict) and extra:
            return f"object of {schema_type(extra, defs, depth + 1)}"
        return "object"
    return str(kind) if kind else "any"


def describe_tool(tool: Tool) -> str:
    """One tool: ``name: description`` then one indented line per parameter."""
    head = f"- {tool.name}: {_one_line(tool.description) or '(no description)'}"
    if tool.return_direct:
        head += " (its result is the final answer)"
    schema = tool.parameters
    props: Mapping[str, Any] = schema.get("properties") or {}
    if not props:
        return f"{head}\n    (no parameters)"
    required = set(schema.get("required", []))
    defs = schema.get("$defs", {})
    lines = [head]
    for name, sub in props.items():
        facts = [schema_type(sub, defs)]
        if name in required:
            facts.append("required")
        else:
            facts.append("optional")
            if "default" in sub:
                facts.append(f"default {json.dumps(sub['default'], ensure_ascii=False, default=str)}")
        text = _one_line(str(sub.get("description", "")))
        lines.append(f"    {name} ({', '.join(facts)}){': ' + text if text else ''}")
    return "\n".join(lines)


def describe_tools(tools: Sequence[Tool]) -> str:
    """The tools for a system prompt, one block each, in the given order; ``""`` for none."""
    return "\n".join(describe_tool(t) for t in tools)


def describe_actions(graph: Toolkit, actions: Iterable[Action | str]) -> str:
    """The given actions (with their tools in ``graph``) and the ``next`` edges among them.

    ``actions`` are Action objects or ids of actions in ``graph`` (typically the recommended
    subgraph); an unknown id raises ``UnknownVertexError``. ``""`` for no actions.
    """
    ids = resolve_actions(graph, actions)
    if not ids:
        return ""
    wanted = set(ids)
    adjacency = graph.adjacency
    lines = ["Steps:"]
    follow: list[str] = []
    for action_id in ids:
        action = graph.get_action(action_id)
        assert action is not None
        lines.append(f"- {action.name}: {_one_line(action.description) or '(no description)'}")
        tools = [tool.name for tool, _ in graph.tools_of(action_id)]
        if tools:
            lines.append(f"    tools: {', '.join(tools)}")
        for v, edge in adjacency[action_id].items():
            if edge["kind"] == "next" and v in wanted:
                target = graph.get_action(v)
                assert target is not None
                follow.append(f"- {action.name} -> {target.name} (score {edge['score']:g})")
    if follow:
        lines.append("Possible next steps:")
        lines.extend(follow)
    return "\n".join(lines)
