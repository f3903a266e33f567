"""``Tool``: a callable a model may use, with the JSON schema the model sees.

A tool's parameters come from the function's type hints and defaults (validated by pydantic).
Parameters annotated with ``ToolCallContext`` or with a type registered in an
``InjectionMapping`` are *injected*: hidden from the model and supplied at call time.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import inspect
import re
import types
import typing
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from tandem.toolkit.context import InjectionMapping, ToolCallContext, injection_mapping
from tandem.toolkit.errors import ToolArgumentsError, ToolDefinitionError

InjectedPolicy = Literal["refuse", "drop"]
"""What to do when a model sends a value for an injected parameter."""

_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
_ARG_LINE = re.compile(r"^\s+(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def _unwrap_optional(annotation: Any) -> Any:
    """``Optional[X]`` and ``X | None`` give ``X``; anything else is returned unchanged."""
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _unwrap_optional(args[0])
    if origin is typing.Annotated:
        return _unwrap_optional(typing.get_args(annotation)[0])
    return annotation


def _split_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The description (text before an ``Args:`` section) and per-parameter descriptions."""
    lines = inspect.cleandoc(doc).splitlines() if doc else []
    description: list[str] = []
    params: dict[str, str] = {}
    in_args = False
    current: str | None = None
    for line in lines:
        if _ARGS_HEADER.match(line):
            in_args, current = True, None
            continue
        if in_args:
            match = _ARG_LINE.match(line)
            if match:
                current = match.group(1).lstrip("*")
                params[current] = match.group(2).strip()
            elif line.strip() and line.startswith((" ", "\t")) and current:
                params[current] = f"{params[current]} {line.strip()}".strip()
            elif line.strip():
                in_args, current = False, None
                description.append(line)
            continue
        description.append(line)
    return "\n".join(description).strip(), params


def _strip_titles(schema: Any) -> Any:
    """Drop pydantic's generated ``title`` keys: they cost prompt tokens and say nothing."""
    if isinstance(schema, dict):
        return {k: _strip_titles(v) for k, v in schema.items() if not (k == "title" and isinstance(v, str))}
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


@dataclass(eq=False)
class Tool:
    """A function a model may call.

    Build one with ``Tool.from_function`` or the ``@tool`` decorator. A tool with an explicit
    ``parameters`` schema and no Python signature (an MCP tool, say) is validated against that
    schema with ``jsonschema``. ``name`` is the tool's id in a toolkit and never changes.
    """

    name: str
    description: str
    function: Callable[..., Any]
    schema: dict[str, Any] | None = None
    """An explicit JSON schema of the arguments; ``None`` derives it from ``function``."""
    timeout: float | None = None
    """Seconds a call may take; ``None`` uses the runner's default."""
    return_direct: bool = False
    """In a ReAct run, this tool's result ends the run and is the answer."""
    requires_approval: bool = False
    """A person (or an ``approve`` callback) must approve each call before it runs; see
    the approval module of the reasoners. A runner never runs such a call on its own."""
    async_function: Callable[..., Awaitable[Any]] | None = None
    """An ``async`` form of ``function`` with the same parameters (an MCP tool's call), awaited
    by ``ainvoke`` instead of running ``function`` in a thread."""
    at_most_once: bool = False
    """Never run this tool's call again once it started: after a lost worker, the call's result is
    a failure saying it was interrupted (it may or may not have taken effect). Other tools are
    at-least-once, with the same ``ToolCallContext.idempotency_key`` on every attempt."""
    injection: InjectionMapping = dataclasses.field(default_factory=lambda: injection_mapping, repr=False)
    _model_cache: tuple[int, dict[str, type], type[BaseModel] | None] | None = dataclasses.field(
        default=None, init=False, repr=False
    )
    _schema_cache: tuple[int, dict[str, Any]] | None = dataclasses.field(default=None, init=False, repr=False)

    @property
    def id(self) -> str:
        """The tool's id in a toolkit: its name."""
        return self.name

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        name: str | None = None,
        description: str | None = None,
        *,
        timeout: float | None = None,
        return_direct: bool = False,
        requires_approval: bool = False,
        at_most_once: bool = False,
        injection: InjectionMapping | None = None,
    ) -> Tool:
        """A tool from a plain or ``async`` function; the docstring is its description."""
        if not callable(fn):
            raise ToolDefinitionError(f"Tool.from_function needs a callable, got {fn!r}")
        tool_name = name or getattr(fn, "__name__", None)
        if not tool_name or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}", tool_name):
            raise ToolDefinitionError(
                f"tool name {tool_name!r} is not usable: use letters, digits, '_', '-' or '.', "
                "starting with a letter or '_', at most 64 characters"
            )
        doc_description, _ = _split_docstring(inspect.getdoc(fn) or "")
        made = cls(
            name=tool_name,
            description=description if description is not None else doc_description,
            function=fn,
            timeout=timeout,
            return_direct=return_direct,
            requires_approval=requires_approval,
            at_most_once=at_most_once,
            injection=injection or injection_mapping,
        )
        made._build()  # fail now, at definition, on an unusable signature
        return made

    # -- schema ---------------------------------------------------------------------------

    def _build(self) -> tuple[dict[str, type], type[BaseModel] | None]:
        """The injected parameters and the pydantic model of the visible ones (cached)."""
        cache = self._model_cache
        if cache is not None and cache[0] == self.injection.version:
            return cache[1], cache[2]
        if self.schema is not None:
            self._model_cache = (self.injection.version, {}, None)
            return {}, None
        try:
            hints = typing.get_type_hints(self.function, include_extras=True)
        except Exception as exc:  # unresolved forward references
            raise ToolDefinitionError(f"tool {self.name!r}: cannot read its type hints: {exc}") from exc
        _, param_docs = _split_docstring(inspect.getdoc(self.function) or "")
        injected: dict[str, type] = {}
        fields: dict[str, Any] = {}
        for pname, param in inspect.signature(self.function).parameters.items():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            annotation = hints.get(pname, Any)
            bare = _unwrap_optional(annotation)
            if bare is ToolCallContext or (isinstance(bare, type) and bare in self.injection):
                injected[pname] = bare
                continue
            default = ... if param.default is param.empty else param.default
            fields[pname] = (annotation, Field(default, description=param_docs.get(pname)))
        model = create_model(
            f"{self.name}_arguments",
            __config__=ConfigDict(extra="forbid", arbitrary_types_allowed=True),
            **fields,
        )
        self._model_cache = (self.injection.version, injected, model)
        return injected, model

    @property
    def injected(self) -> dict[str, type]:
        """Parameters filled in by the runtime, by name, with the type injected."""
        return dict(self._build()[0])

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the arguments the model supplies (injected ones left out)."""
        if self.schema is not None:
            return self.schema
        model = self._build()[1]
        assert model is not None
        cached = self._schema_cache
        if cached is None or cached[0] != self.injection.version:
            # Built once per injection version: every model request describes every tool.
            schema = _strip_titles(model.model_json_schema())
            schema.pop("additionalProperties", None)
            schema.setdefault("properties", {})
            cached = self._schema_cache = (self.injection.version, schema)
        return copy.deepcopy(cached[1])

    def openai_schema(self) -> dict[str, Any]:
        """The tool in the OpenAI ``tools=`` format."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    # -- validation and invocation --------------------------------------------------------

    def validate_args(
        self, args: Mapping[str, Any], *, on_injected: InjectedPolicy = "refuse"
    ) -> dict[str, Any]:
        """Check ``args`` against the schema; return the values to call with.

        Raises ``ToolArgumentsError`` naming the first bad field and why. A value for an
        injected parameter is refused (prompt mode) or silently dropped (``"drop"``).
        """
        injected, model = self._build()
        given = dict(args)
        for pname in injected:
            if pname in given:
                if on_injected == "drop":
                    given.pop(pname)
                else:
                    raise ToolArgumentsError(
                        self.name, pname, "this parameter is supplied by the system; remove it"
                    )
        if model is None:
            return self._validate_with_schema(given)
        try:
            validated = model.model_validate(given)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"]) or "(arguments)"
            reason = err["msg"]
            if err["type"] == "extra_forbidden":
                known = ", ".join(model.model_fields) or "none"
                reason = f"unknown parameter; the parameters are: {known}"
            elif err["type"] == "missing":
                reason = "required parameter is missing"
            raise ToolArgumentsError(self.name, loc, reason) from None
        return {k: getattr(validated, k) for k in model.model_fields}

    def _validate_with_schema(self, given: dict[str, Any]) -> dict[str, Any]:
        import jsonschema

        assert self.schema is not None
        try:
            jsonschema.validate(given, self.schema)
        except jsonschema.ValidationError as exc:
            loc = ".".join(str(p) for p in exc.absolute_path) or "(arguments)"
            raise ToolArgumentsError(self.name, loc, exc.message) from None
        return given

    def _call_args(
        self,
        args: Mapping[str, Any],
        context: ToolCallContext | None,
        services: InjectionMapping | None,
    ) -> dict[str, Any]:
        """``args`` plus a value for every injected parameter."""
        injected, _ = self._build()
        mapping = services or self.injection
        call_args = dict(args)
        for pname, ptype in injected.items():
            if ptype is ToolCallContext:
                call_args[pname] = context or ToolCallContext()
            elif ptype in mapping:
                call_args[pname] = mapping.get(ptype)
            else:
                call_args[pname] = None
        return call_args

    def invoke(
        self,
        args: Mapping[str, Any],
        *,
        context: ToolCallContext | None = None,
        services: InjectionMapping | None = None,
    ) -> Any:
        """Call the function with validated ``args`` plus injected values; runs coroutines too.

        Blocking: run it in a worker thread when a timeout or parallelism is needed.
        """
        result = self.function(**self._call_args(args, context, services))
        if inspect.isawaitable(result):
            return asyncio.run(_await(result))
        return result

    async def ainvoke(
        self,
        args: Mapping[str, Any],
        *,
        context: ToolCallContext | None = None,
        services: InjectionMapping | None = None,
    ) -> Any:
        """``invoke`` for asyncio code: an ``async`` function (or ``async_function``) is awaited in
        the running loop, a plain one runs in a worker thread (``asyncio.to_thread``) so the loop
        never blocks."""
        call_args = self._call_args(args, context, services)
        if self.async_function is not None:
            return await self.async_function(**call_args)
        if inspect.iscoroutinefunction(self.function):
            return await self.function(**call_args)
        result = await asyncio.to_thread(lambda: self.function(**call_args))
        if inspect.isawaitable(result):  # a plain function that returned an awaitable
            return await result
        return result


async def _await(awaitable: Any) -> Any:
    return await awaitable


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    return_direct: bool = False,
    requires_approval: bool = False,
    at_most_once: bool = False,
) -> Any:
    """Decorator form of ``Tool.from_function``: ``@tool`` or ``@tool(name=..., timeout=...,
    requires_approval=True, at_most_once=True)``."""

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool.from_function(
            f,
            name=name,
            description=description,
            timeout=timeout,
            return_direct=return_direct,
            requires_approval=requires_approval,
            at_most_once=at_most_once,
        )

    return wrap(fn) if fn is not None else wrap
