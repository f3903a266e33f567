"""``load_toolkit``: a toolkit from a YAML file or from a ``package.module:attr`` reference.

The YAML file has three optional lists, ``tools``, ``groups`` and ``actions``, and an optional
``policy`` mapping (``allow``, ``grant``, ``deny``: see ``tandem.toolkit.policy``)::

    tools:
      - function: mypkg.tools:add          # name defaults to the function's name
      - {name: search_docs, function: mypkg.tools:search, timeout: 10, return_direct: false}
      - {function: mypkg.tools:send_email, requires_approval: true}   # a person approves each call
      - {function: mypkg.tools:charge_card, at_most_once: true}   # never re-run after a lost worker
    groups:
      - name: files
        mcp: {transport: stdio, command: python, args: ["-m", "mypkg.mcp_server"], timeout: 30}
      - name: web                          # tool names get the prefix: web.fetch, ...
        mcp: {transport: streamable-http, url: "http://mcp:8000/mcp", headers: {X-Key: k}, prefix: web.}
    actions:
      - name: compute
        description: Do the arithmetic the task needs
        tools: [add, {tool: search_docs, score: 0.7}, {group: files, score: 0.9}]
        next: [{action: report, score: 0.8}]
      - name: report
        description: Write the answer

``mcp`` takes ``transport`` (``stdio``, the default, or ``streamable-http``), ``command``,
``args``, ``env``, ``cwd`` (stdio), ``url``, ``headers`` (HTTP), ``timeout`` (seconds, default
30) and ``prefix`` (put before each of the server's tool names, to keep names distinct).

Contract: scores default to 1.0 and lie in [0, 1]; each action row stands alone (only ``next``
makes edges between actions); a tool named by several actions is one vertex; ``{group: g}``
connects every tool of ``g`` to the action. Tools, groups and actions share one namespace of
names. Every mistake raises ``ToolDefinitionError`` naming the file and the item.

MCP groups are listed **at load time**: each declared group's server is started (stdio) or
contacted (HTTP) once, so its tools are real vertices when the load returns and a broken
server fails the load, not the first job. Each worker process that loads the toolkit pays
that once.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

import yaml

from tandem.toolkit.action import Action
from tandem.toolkit.errors import ToolDefinitionError, ToolkitError
from tandem.toolkit.graph import Toolkit, check_score
from tandem.toolkit.group import ToolGroup
from tandem.toolkit.mcp_group import McpToolGroup
from tandem.toolkit.policy import ToolPolicy, ToolPolicyError
from tandem.toolkit.tool import Tool

logger = logging.getLogger(__name__)

_REFERENCE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_TOOL_KEYS = {
    "function", "name", "description", "timeout", "return_direct", "requires_approval", "at_most_once"
}
_GROUP_KEYS = {"name", "description", "mcp"}
_MCP_KEYS = {"transport", "command", "args", "env", "cwd", "url", "headers", "timeout", "prefix"}
_ACTION_KEYS = {"name", "description", "tools", "next"}


def load_toolkit(source: str | os.PathLike[str]) -> Toolkit:
    """The toolkit described by a YAML file, or named by ``"package.module:attr"``.

    A path (or any string naming an existing file) is read as YAML (format in the module
    docstring). Otherwise ``module:attr`` is imported: a ``Toolkit`` is returned as it is, a
    ``ToolkitService`` gives its toolkit, and a zero-argument callable is called for one.
    """
    if isinstance(source, os.PathLike) or Path(source).is_file() or not _REFERENCE.match(source):
        return _Loader(Path(source)).load()
    obj = import_reference(source, f"toolkit reference {source!r}")
    from tandem.toolkit.service import ToolkitService

    if callable(obj) and not isinstance(obj, Toolkit | ToolkitService):
        try:
            obj = obj()
        except ToolkitError:
            raise
        except Exception as exc:
            raise ToolDefinitionError(f"toolkit reference {source!r}: calling it raised {exc!r}") from exc
    if isinstance(obj, ToolkitService):
        obj = obj.get_toolkit()
    if not isinstance(obj, Toolkit):
        raise ToolDefinitionError(
            f"toolkit reference {source!r} gave {type(obj).__name__}, not a Toolkit "
            "(point it at a Toolkit, a ToolkitService or a zero-argument function returning one)"
        )
    return obj


def import_reference(reference: str, where: str) -> Any:
    """The object named by ``"package.module:attr"`` (``attr`` may be dotted).

    ``ToolDefinitionError`` naming ``where`` when the text is malformed, the module cannot be
    imported, or the attribute is missing.
    """
    module_name, sep, attr_path = reference.partition(":") if isinstance(reference, str) else ("", "", "")
    if not sep or not module_name or not attr_path:
        raise ToolDefinitionError(
            f"{where}: {reference!r} is not an import path; write 'package.module:attribute'"
        )
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ToolDefinitionError(
                f"{where}: no module named {module_name!r} (check the spelling and sys.path)"
            ) from exc
        raise ToolDefinitionError(f"{where}: importing {module_name!r} failed: {exc}") from exc
    except Exception as exc:
        raise ToolDefinitionError(f"{where}: importing {module_name!r} raised {exc!r}") from exc
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            raise ToolDefinitionError(f"{where}: module {module_name!r} has no attribute {attr_path!r}")
        obj = getattr(obj, part)
    return obj


class _Loader:
    """One YAML load: checks the whole file first, then starts MCP groups, then builds."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tools: dict[str, Tool] = {}
        self.groups: dict[str, ToolGroup] = {}
        self.actions: dict[str, Action] = {}

    def fail(self, where: str, problem: str) -> NoReturn:
        raise ToolDefinitionError(f"{self.path}: {where}: {problem}")

    def load(self) -> Toolkit:
        doc = self._read()
        for i, row in enumerate(self._rows(doc, "tools")):
            self._tool(i, row)
        for i, row in enumerate(self._rows(doc, "groups")):
            self._group(i, row)
        rows = list(enumerate(self._rows(doc, "actions")))
        for i, row in rows:
            self._action_head(i, row)
        edges = [edge for i, row in rows for edge in self._action_edges(i, row)]
        policy = None
        if "policy" in doc:
            try:
                policy = ToolPolicy.from_mapping(doc["policy"], f"{self.path}: policy")
            except ToolPolicyError as exc:
                raise ToolkitError(str(exc)) from None
        graph = self._build(edges)
        graph.policy = policy
        return graph

    # -- reading --------------------------------------------------------------------------

    def _read(self) -> dict[str, Any]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ToolDefinitionError(f"toolkit file {str(self.path)!r} does not exist") from None
        except OSError as exc:
            raise ToolDefinitionError(f"toolkit file {str(self.path)!r} cannot be read: {exc}") from exc
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ToolDefinitionError(f"{self.path}: not valid YAML: {exc}") from exc
        if doc is None:
            return {}
        if not isinstance(doc, dict):
            self.fail("top level", f"expected a mapping with tools/groups/actions, got {type(doc).__name__}")
        unknown = sorted(set(map(str, doc)) - {"tools", "groups", "actions", "policy"})
        if unknown:
            self.fail("top level", f"unknown keys {unknown}; the keys are tools, groups, actions and policy")
        return doc

    def _rows(self, doc: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
        rows = doc.get(key) or []
        if not isinstance(rows, list):
            self.fail(key, f"expected a list, got {type(rows).__name__}")
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                self.fail(f"{key}[{i}]", f"expected a mapping, got {row!r}")
        return rows

    def _keys(self, where: str, row: Mapping[str, Any], allowed: set[str]) -> None:
        unknown = sorted(set(map(str, row)) - allowed)
        if unknown:
            self.fail(where, f"unknown keys {unknown}; allowed: {sorted(allowed)}")

    def _text(self, where: str, row: Mapping[str, Any], key: str, required: bool = False) -> str | None:
        value = row.get(key)
        if value is None and not required:
            return None
        if not isinstance(value, str) or not value.strip():
            self.fail(where, f"{key!r} must be a non-empty string, got {value!r}")
        return value

    def _claim(self, where: str, name: str) -> None:
        for kind, names in (("tool", self.tools), ("group", self.groups), ("action", self.actions)):
            if name in names:
                self.fail(
                    where,
                    f"the name {name!r} is already used by {'an' if kind == 'action' else 'a'} "
                    f"{kind}; tools, groups and actions need distinct names",
                )

    # -- items ----------------------------------------------------------------------------

    def _tool(self, i: int, row: Mapping[str, Any]) -> None:
        where = f"tools[{i}]" + (f" {row['name']!r}" if isinstance(row.get("name"), str) else "")
        self._keys(where, row, _TOOL_KEYS)
        reference = self._text(where, row, "function", required=True)
        assert reference is not None
        where = f"{where} ({reference})"
        name = self._text(where, row, "name")
        description = row.get("description")
        if description is not None and not isinstance(description, str):
            self.fail(where, f"'description' must be a string, got {description!r}")
        timeout = row.get("timeout")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
        ):
            self.fail(where, f"'timeout' must be a positive number of seconds, got {timeout!r}")
        return_direct = row.get("return_direct", False)
        if not isinstance(return_direct, bool):
            self.fail(where, f"'return_direct' must be true or false, got {return_direct!r}")
        requires_approval = row.get("requires_approval", False)
        if not isinstance(requires_approval, bool):
            self.fail(where, f"'requires_approval' must be true or false, got {requires_approval!r}")
        at_most_once = row.get("at_most_once", False)
        if not isinstance(at_most_once, bool):
            self.fail(where, f"'at_most_once' must be true or false, got {at_most_once!r}")
        obj = import_reference(reference, f"{self.path}: {where}")
        if isinstance(obj, Tool):
            overrides: dict[str, Any] = {
                k: v
                for k, v in {"name": name, "description": description, "timeout": timeout}.items()
                if v is not None
            }
            if "return_direct" in row:
                overrides["return_direct"] = return_direct
            if "requires_approval" in row:
                overrides["requires_approval"] = requires_approval
            if "at_most_once" in row:
                overrides["at_most_once"] = at_most_once
            made = dataclasses.replace(obj, **overrides) if overrides else obj
        elif callable(obj):
            try:
                made = Tool.from_function(
                    obj,
                    name=name,
                    description=description,
                    timeout=timeout,
                    return_direct=return_direct,
                    requires_approval=requires_approval,
                    at_most_once=at_most_once,
                )
            except ToolkitError as exc:
                self.fail(where, str(exc))
        else:
            self.fail(where, f"{reference!r} is a {type(obj).__name__}, not a function or a Tool")
        self._claim(where, made.name)
        self.tools[made.name] = made

    def _group(self, i: int, row: Mapping[str, Any]) -> None:
        where = f"groups[{i}]"
        self._keys(where, row, _GROUP_KEYS)
        name = self._text(where, row, "name", required=True)
        assert name is not None
        where = f"groups[{i}] {name!r}"
        mcp = row.get("mcp")
        if not isinstance(mcp, dict):
            self.fail(where, f"'mcp' must be a mapping (transport, command, args, url, ...), got {mcp!r}")
        self._keys(f"{where} mcp", mcp, _MCP_KEYS)
        args, env, headers = mcp.get("args", []), mcp.get("env"), mcp.get("headers")
        if not isinstance(args, list) or not all(isinstance(a, str | int | float) for a in args):
            self.fail(where, f"mcp 'args' must be a list of strings, got {args!r}")
        for key, value in (("env", env), ("headers", headers)):
            if value is not None and not isinstance(value, dict):
                self.fail(where, f"mcp {key!r} must be a mapping of strings, got {value!r}")
        for key in ("transport", "command", "url", "cwd", "prefix"):
            self._text(f"{where} mcp", mcp, key)
        try:
            group = McpToolGroup(
                name,
                transport=mcp.get("transport", "stdio"),
                command=mcp.get("command"),
                args=[str(a) for a in args],
                env={str(k): str(v) for k, v in env.items()} if env else None,
                cwd=mcp.get("cwd"),
                url=mcp.get("url"),
                headers={str(k): str(v) for k, v in headers.items()} if headers else None,
                timeout=mcp.get("timeout", 30.0),
                description=str(row.get("description") or ""),
                prefix=str(mcp.get("prefix") or ""),
            )
        except ToolkitError as exc:
            self.fail(where, str(exc))
        self._claim(where, name)
        self.groups[name] = group

    def _action_head(self, i: int, row: Mapping[str, Any]) -> None:
        where = f"actions[{i}]"
        self._keys(where, row, _ACTION_KEYS)
        name = self._text(where, row, "name", required=True)
        assert name is not None
        where = f"action {name!r} (actions[{i}])"
        description = row.get("description") or ""
        if not isinstance(description, str):
            self.fail(where, f"'description' must be a string, got {description!r}")
        self._claim(where, name)
        self.actions[name] = Action(name, name, description)

    def _score(self, where: str, entry: Mapping[str, Any]) -> float:
        try:
            return check_score(entry.get("score", 1.0))
        except ToolkitError as exc:
            self.fail(where, str(exc))

    def _list(self, where: str, row: Mapping[str, Any], key: str) -> list[Any]:
        value = row.get(key) or []
        if not isinstance(value, list):
            self.fail(where, f"{key!r} must be a list, got {value!r}")
        return value

    def _action_edges(self, i: int, row: Mapping[str, Any]) -> list[tuple[str, str, str, float]]:
        """``(kind, action, target, score)`` for the action's ``tools`` and ``next`` entries."""
        name = row["name"]
        where = f"action {name!r} (actions[{i}])"
        edges: list[tuple[str, str, str, float]] = []
        for j, entry in enumerate(self._list(where, row, "tools")):
            at = f"{where} tools[{j}]"
            if isinstance(entry, str):
                entry = {"tool": entry}
            if not isinstance(entry, dict) or len({"tool", "group"} & set(entry)) != 1:
                expected = "a tool name, {tool: name, score} or {group: name, score}"
                self.fail(at, f"expected {expected}, got {entry!r}")
            self._keys(at, entry, {"tool", "group", "score"})
            score = self._score(at, entry)
            if "group" in entry:
                group = entry["group"]
                if group not in self.groups:
                    self.fail(at, f"unknown group {group!r}; {self._known('group', self.groups)}")
                edges.append(("group", name, group, score))
            else:
                tool = entry["tool"]
                if tool not in self.tools:
                    hint = f" ({tool!r} is a group: write {{group: {tool}}})" if tool in self.groups else ""
                    self.fail(at, f"unknown tool {tool!r}; {self._known('tool', self.tools)}{hint}")
                edges.append(("call", name, tool, score))
        for j, entry in enumerate(self._list(where, row, "next")):
            at = f"{where} next[{j}]"
            if isinstance(entry, str):
                entry = {"action": entry}
            if not isinstance(entry, dict) or "action" not in entry:
                self.fail(at, f"expected an action name or {{action: name, score}}, got {entry!r}")
            self._keys(at, entry, {"action", "score"})
            target = entry["action"]
            if target not in self.actions:
                self.fail(at, f"unknown action {target!r}; {self._known('action', self.actions)}")
            edges.append(("next", name, target, self._score(at, entry)))
        return edges

    def _known(self, kind: str, names: Mapping[str, Any]) -> str:
        return f"known {kind}s: {', '.join(map(repr, names))}" if names else f"no {kind}s are declared"

    # -- building -------------------------------------------------------------------------

    def _build(self, edges: list[tuple[str, str, str, float]]) -> Toolkit:
        graph = Toolkit()
        for action in self.actions.values():
            graph.add_vertex(action.id, data=action)
        for tool in self.tools.values():
            graph.add_vertex(tool.id, data=tool)
        group_tools: dict[str, list[str]] = {}
        for name, group in self.groups.items():
            where = f"group {name!r}"
            try:
                listed = group.tools()
            except Exception as exc:
                self.fail(where, f"listing its tools failed: {exc}")
            graph.add_vertex(name, data=group)
            for tool in listed:
                if tool.id in graph:
                    self.fail(
                        where,
                        f"its tool {tool.id!r} clashes with another name in the toolkit; "
                        "give the group a 'prefix' in its mcp settings",
                    )
                graph.add_vertex(tool.id, data=tool)
                graph.add_edge(name, tool.id)
            group_tools[name] = [t.id for t in listed]
        called: set[str] = set()
        for kind, source, target, score in edges:
            targets = group_tools[target] if kind == "group" else [target]
            for t in targets:
                graph.add_edge(source, t, score)
            if kind != "next":
                called.update(targets)
        for name in self.tools:
            if name not in called:
                logger.warning("%s: tool %r is called by no action; it is never recommended", self.path, name)
        return graph
