"""Running tool calls: validation, injection, timeouts, output limits, results in call order.

One ``ToolRunner`` serves both drivers: the in-process reasoners call ``run_calls`` for a whole
reply, and the Celery ``run_tool`` task calls ``run_call`` for one call of a fan-out.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from tandem.reasoner.artifacts import READ_ARTIFACT, preview
from tandem.reasoner.function_calling import ParsedFunctionCall, format_parse_error, parse_function_calls
from tandem.reasoner.messages import FunctionCallResult, FunctionCallStatus
from tandem.toolkit.artifacts import ArtifactRef, artifact_handle, storable, text_bytes
from tandem.toolkit.context import InjectionMapping, ToolCallContext
from tandem.toolkit.errors import ToolArgumentsError
from tandem.toolkit.output import cut_note, render_head
from tandem.toolkit.redaction import head_margin, redact, redact_data, redact_head
from tandem.toolkit.tool import InjectedPolicy, Tool

_TIMEOUT_ADVICE = "Try smaller input or another approach."


def render_output(value: Any) -> str:
    """A tool's return value as text: strings as they are, the rest as JSON when it can be.

    Never raises: a value that neither JSON nor ``str`` can render (a huge int, a broken
    ``__str__``) is described by its type instead. (``ToolRunner`` renders only the head of a long
    value: ``tandem.toolkit.output.render_head``.)
    """
    return render_head(value, 0)[0]


def cut_output(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying so, so the model knows it saw a part."""
    if limit <= 0 or len(text) <= limit:
        return text
    return text[:limit] + cut_note(limit, len(text), len(text))


def shown_output(text: str, limit: int, extra: Sequence[str] = (), size: int | None = -1) -> str:
    """What the model and every record see of an output: at most ``limit`` characters, redacted
    (``extra``: the call's secrets), with a note when it was cut (``limit <= 0``: no cut).

    The cut comes first and the redaction reads only ``limit`` characters and a margin past them
    (``tandem.toolkit.redaction.redact_head``), so the cost does not grow with the output: a
    50 MB output costs what ``limit`` characters cost. ``text`` may be only the start of the
    output, as ``render_head`` gives it: ``size`` is then the output's full length, or ``None``
    when it is unknown; by default ``text`` is the whole output.
    """
    size = len(text) if size == -1 else size
    shown = redact_head(text, limit, extra)
    if limit <= 0 or (size is not None and size <= limit):
        return shown
    return shown + cut_note(limit, size, len(text))


class HungTools:
    """The tool threads still running past their timeout in this process.

    A Python thread cannot be killed, so a tool that ignores its timeout keeps its thread until it
    returns. Those threads are counted here; once ``limit`` of them are alive, ``ToolRunner``
    refuses to start more calls (the call gets a FAILED result saying why) instead of leaking a
    thread per call. Restarting the worker process reclaims them; MCP tools run in their own
    processes and are killed by their group's timeout instead.
    """

    def __init__(self) -> None:
        self._threads: set[threading.Thread] = set()
        self._lock = threading.Lock()

    def add(self, thread: threading.Thread) -> None:
        """Count ``thread`` as hung."""
        with self._lock:
            self._threads.add(thread)

    def count(self) -> int:
        """How many hung threads are still alive (finished ones are forgotten)."""
        with self._lock:
            self._threads = {t for t in self._threads if t.is_alive()}
            return len(self._threads)


hung_tools = HungTools()
"""The process-wide count of hung tool threads."""


def _call_with_timeout(fn: Any, timeout: float) -> Any:
    """Run ``fn()`` in a daemon thread; ``TimeoutError`` if it has not returned in ``timeout``.

    A thread cannot be killed: a hung tool keeps its thread until it returns (it is counted in
    ``hung_tools``), but the job moves on.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    # The caller's context goes with the tool: its log lines mask the job's secrets too.
    thread = threading.Thread(
        target=contextvars.copy_context().run, args=(target,), name="tandem-tool", daemon=True
    )
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        hung_tools.add(thread)
        raise TimeoutError(f"the tool did not finish within {timeout:g} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _describe_error(exc: BaseException) -> str:
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:
        return type(exc).__name__


@dataclass
class ToolRunner:
    """Executes tool calls and turns every outcome, good or bad, into a ``FunctionCallResult``.

    ``timeout`` applies to tools without their own; ``max_output_chars`` cuts long outputs;
    ``services`` overrides the process-wide injection mapping; ``max_parallel`` bounds how many
    calls of one reply run at once; ``max_calls`` is how many calls of one reply run at all (the
    rest get a FAILED result naming the cap); ``max_args_bytes`` bounds one call's arguments as
    JSON; ``max_hung`` is how many timed-out tool threads may still run before no more are started.
    Every output and error is cut to ``max_output_chars`` and then redacted (with the call
    context's secrets) before the model or any record sees it (``shown_output``): cut first, so a
    huge output or error costs no more than ``max_output_chars`` characters to redact.

    ``artifact_bytes``: an output longer than this in UTF-8 bytes (``TANDEM_ARTIFACT_BYTES``; 0:
    never) is kept whole, redacted, as an artifact of the job when the call's context keeps
    artifacts (``ToolCallContext.bind_artifacts``), and its result's ``output`` is a preview (the
    first quarter of ``max_output_chars``, and the handle: ``tandem.reasoner.artifacts``). Such an
    output is rendered as far as the job's memory limit allows, no further; one that does not fit
    in it is cut as any output is, saying why it was not kept. The built-in ``read_artifact``'s
    pages are never kept again.
    """

    timeout: float = 60.0
    max_output_chars: int = 8000
    max_parallel: int = 8
    services: InjectionMapping | None = None
    on_injected: InjectedPolicy = "refuse"
    max_calls: int = 16
    max_args_bytes: int = 64_000
    max_hung: int = 16
    artifact_bytes: int = 8000

    @property
    def preview_chars(self) -> int:
        """How many characters of an output kept as an artifact the model reads first."""
        return self.max_output_chars // 4 if self.max_output_chars > 0 else 2000

    def call_function(
        self,
        tools: Sequence[Tool],
        model_response_text: str,
        tool_call_ctx: ToolCallContext | None = None,
    ) -> list[FunctionCallResult] | None:
        """Parse the ``<function_call>`` blocks of a reply and run them; ``None`` if there are none."""
        calls = parse_function_calls(model_response_text)
        if not calls:
            return None
        return self.run_calls(tools, calls, tool_call_ctx)

    def run_calls(
        self,
        tools: Sequence[Tool],
        calls: Sequence[ParsedFunctionCall],
        ctx: ToolCallContext | None = None,
    ) -> list[FunctionCallResult]:
        """Run ``calls`` in parallel (up to ``max_parallel``); results come back in call order."""
        by_name = {t.name: t for t in tools}
        base = ctx or ToolCallContext()

        def one(index: int) -> FunctionCallResult:
            call_ctx = base.model_copy(update={"call_index": index})
            return self.run_call(by_name, calls[index - 1], index, call_ctx)

        if len(calls) == 1:
            return [one(1)]
        with ThreadPoolExecutor(max_workers=min(self.max_parallel, len(calls))) as pool:
            return list(pool.map(one, range(1, len(calls) + 1)))

    def run_call(
        self,
        tools: Mapping[str, Tool],
        call: ParsedFunctionCall,
        index: int,
        ctx: ToolCallContext | None = None,
        *,
        call_id: str | None = None,
        approved: bool = False,
    ) -> FunctionCallResult:
        """Run one call and report its real outcome; never raises.

        Whatever goes wrong (bad arguments, a tool error, a timeout, an output that cannot be
        rendered, a bug here) becomes a FAILED result the model can read, and an output is only
        reported FAILED when the tool itself failed: once the tool has run, its success stands.
        A tool declaring ``requires_approval`` runs only with ``approved=True``: the caller says
        a decision approved this call (see ``tandem.reasoner.approval``).
        """
        secrets = tuple(ctx.secrets.values()) if ctx is not None else ()
        try:
            return self._run_call(tools, call, index, ctx, call_id, secrets, approved)
        except Exception as exc:  # the contract: a result, whatever happened
            output = f"the call could not be handled ({_describe_error(exc)})"
            return self._result(call, index, call_id, secrets, FunctionCallStatus.FAILED, output)

    async def arun_call(
        self,
        tools: Mapping[str, Tool],
        call: ParsedFunctionCall,
        index: int,
        ctx: ToolCallContext | None = None,
        *,
        call_id: str | None = None,
        approved: bool = False,
    ) -> FunctionCallResult:
        """``run_call`` for asyncio: an ``async`` tool is awaited in the running loop, a plain one
        runs in a thread; the same checks, limits, timeout and results."""
        secrets = tuple(ctx.secrets.values()) if ctx is not None else ()

        def failed(output: str) -> FunctionCallResult:
            return self._result(call, index, call_id, secrets, FunctionCallStatus.FAILED, output)

        try:
            ready = self._prepare(tools, call, index, call_id, secrets, approved)
            if isinstance(ready, FunctionCallResult):
                return ready
            tool, args = ready
            timeout = tool.timeout if tool.timeout is not None else self.timeout
            try:
                value = await asyncio.wait_for(
                    tool.ainvoke(args, context=ctx, services=self.services), timeout
                )
            except TimeoutError:
                within = f"the tool did not finish within {timeout:g} s"
                return failed(f"{tool.name!r} timed out: {within}. {_TIMEOUT_ADVICE}")
            except Exception as exc:
                return failed(f"{tool.name!r} raised {_describe_error(exc)}")
            return self._succeeded(tool, call, index, call_id, secrets, value, ctx)
        except Exception as exc:  # the contract: a result, whatever happened
            return failed(f"the call could not be handled ({_describe_error(exc)})")

    def run_indexed(
        self,
        tools: Sequence[Tool],
        calls: Sequence[tuple[int, ParsedFunctionCall]],
        ctx: ToolCallContext | None = None,
        call_ids: Mapping[int, str | None] | None = None,
        *,
        approved: bool = False,
    ) -> list[FunctionCallResult]:
        """Run some calls of a reply, each with its number in the reply, in parallel (up to
        ``max_parallel``); results in the order given."""
        by_name = {t.name: t for t in tools}
        base = ctx or ToolCallContext()
        ids = call_ids or {}

        def one(item: tuple[int, ParsedFunctionCall]) -> FunctionCallResult:
            index, call = item
            call_ctx = base.model_copy(update={"call_index": index})
            return self.run_call(by_name, call, index, call_ctx, call_id=ids.get(index), approved=approved)

        if len(calls) <= 1:
            return [one(item) for item in calls]
        with ThreadPoolExecutor(max_workers=max(1, min(self.max_parallel, len(calls)))) as pool:
            return list(pool.map(one, calls))

    async def arun_indexed(
        self,
        tools: Sequence[Tool],
        calls: Sequence[tuple[int, ParsedFunctionCall]],
        ctx: ToolCallContext | None = None,
        call_ids: Mapping[int, str | None] | None = None,
        *,
        approved: bool = False,
    ) -> list[FunctionCallResult]:
        """``run_indexed`` for asyncio: the calls are awaited concurrently (up to
        ``max_parallel`` at once); results in the order given."""
        by_name = {t.name: t for t in tools}
        base = ctx or ToolCallContext()
        ids = call_ids or {}
        limit = asyncio.Semaphore(max(1, self.max_parallel))

        async def one(item: tuple[int, ParsedFunctionCall]) -> FunctionCallResult:
            index, call = item
            call_ctx = base.model_copy(update={"call_index": index})
            async with limit:
                return await self.arun_call(
                    by_name, call, index, call_ctx, call_id=ids.get(index), approved=approved
                )

        return list(await asyncio.gather(*(one(item) for item in calls)))

    def _result(
        self,
        call: ParsedFunctionCall,
        index: int,
        call_id: str | None,
        secrets: tuple[str, ...],
        status: FunctionCallStatus,
        output: str,
        *,
        size: int | None = -1,
        name: str | None = None,
        return_direct: bool = False,
        cut: bool = True,
    ) -> FunctionCallResult:
        try:
            args = json.loads(json.dumps(call.args, default=str))
            if not isinstance(args, dict):
                args = {}
        except Exception:
            args = {"(arguments)": "cannot be shown"}
        if len(json.dumps(args, ensure_ascii=False)) > self.max_args_bytes:
            args = {"(arguments)": f"over {self.max_args_bytes} bytes, not kept"}
        objective = call.call_objective
        try:
            # An artifact's preview (``cut=False``) is bounded already, and redacted whole.
            shown = (
                shown_output(output, self.max_output_chars, secrets, size) if cut else redact(output, secrets)
            )
        except Exception:
            shown = "(the output could not be shown)"
        return FunctionCallResult(
            index=index,
            name=name or (call.name if isinstance(call.name, str) and call.name else "(unnamed)"),
            call_objective=redact(objective, secrets) if isinstance(objective, str) else "",
            args=redact_data(args, secrets),
            status=status,
            output=shown,
            call_id=call_id,
            return_direct=return_direct,
        )

    def _run_call(
        self,
        tools: Mapping[str, Tool],
        call: ParsedFunctionCall,
        index: int,
        ctx: ToolCallContext | None,
        call_id: str | None,
        secrets: tuple[str, ...],
        approved: bool = False,
    ) -> FunctionCallResult:
        ready = self._prepare(tools, call, index, call_id, secrets, approved)
        if isinstance(ready, FunctionCallResult):
            return ready
        tool, args = ready
        timeout = tool.timeout if tool.timeout is not None else self.timeout
        try:
            value = _call_with_timeout(
                lambda: tool.invoke(args, context=ctx, services=self.services), timeout
            )
        except TimeoutError as exc:
            return self._result(
                call,
                index,
                call_id,
                secrets,
                FunctionCallStatus.FAILED,
                f"{tool.name!r} timed out: {exc}. {_TIMEOUT_ADVICE}",
            )
        except Exception as exc:
            return self._result(
                call,
                index,
                call_id,
                secrets,
                FunctionCallStatus.FAILED,
                f"{tool.name!r} raised {_describe_error(exc)}",
            )
        return self._succeeded(tool, call, index, call_id, secrets, value, ctx)

    def _succeeded(
        self,
        tool: Tool,
        call: ParsedFunctionCall,
        index: int,
        call_id: str | None,
        secrets: tuple[str, ...],
        value: Any,
        ctx: ToolCallContext | None = None,
    ) -> FunctionCallResult:
        kept = self._keep(tool, value, secrets, ctx)
        if isinstance(kept, tuple):
            shown, ref = kept
            result = self._result(
                call,
                index,
                call_id,
                secrets,
                FunctionCallStatus.SUCCEEDED,
                shown,
                name=tool.name,
                return_direct=tool.return_direct,
                cut=False,
            )
            return result.model_copy(update={"artifact": ref})
        limit = self.max_output_chars
        # Rendered only as far as shown (plus the margin the redaction reads past the cut).
        text, size = render_head(value, limit + head_margin(secrets) if limit > 0 else 0)
        result = self._result(
            call,
            index,
            call_id,
            secrets,
            FunctionCallStatus.SUCCEEDED,
            text,
            size=size,
            name=tool.name,
            return_direct=tool.return_direct,
        )
        return result if kept is None else result.model_copy(update={"output": result.output + kept})

    def _keep(
        self, tool: Tool, value: Any, secrets: tuple[str, ...], ctx: ToolCallContext | None
    ) -> tuple[str, ArtifactRef] | str | None:
        """An output over ``artifact_bytes`` kept as an artifact: its preview and reference; or
        the line saying why it was not kept (added to the cut output); ``None`` for an output
        shown as it is (not over the threshold, or no artifacts here)."""
        store = ctx.artifacts if ctx is not None else None
        if store is None or self.artifact_bytes <= 0 or tool.name == READ_ARTIFACT:
            return None
        head, size = render_head(value, self.artifact_bytes + 1)
        if size is not None and size <= self.artifact_bytes and text_bytes(head) <= self.artifact_bytes:
            return None  # short enough to show as it is
        assert ctx is not None
        cap = ctx.artifact_limit or 0
        over = f"it would bring the job's memory over its limit of {cap} bytes (TANDEM_MAX_MEMORY_BYTES)"
        if cap and size is not None and size > cap:
            # Known too long already: not copied up to the limit (20 MB by default), a copy that
            # holds the GIL, so the process's lease keeper with it, for seconds on a loaded machine.
            return f"\n[the whole output was not kept: {over}]"
        text, size = render_head(value, cap + 1 if cap else 0)
        if size is None or (cap and (size > cap or text_bytes(text) > cap)):
            return f"\n[the whole output was not kept: {over}]"  # before redacting a text never kept
        kept = storable(redact(text, secrets))
        try:
            ref = store.put(artifact_handle(ctx.round, ctx.call_index, kept), kept, limit=cap or None)
        except Exception as exc:  # the tool ran: its success stands, shown cut
            return f"\n[the whole output was not kept: storing it failed ({_describe_error(exc)})]"
        if ref is None:
            return f"\n[the whole output was not kept: {over}]"
        return preview(kept, ref, self.preview_chars, ctx.page_chars), ref

    def _prepare(
        self,
        tools: Mapping[str, Tool],
        call: ParsedFunctionCall,
        index: int,
        call_id: str | None,
        secrets: tuple[str, ...],
        approved: bool,
    ) -> FunctionCallResult | tuple[Tool, dict[str, Any]]:
        """The tool and validated arguments of a call, or the FAILED result that replaces it
        (the checks and limits ``run_call`` and ``arun_call`` share)."""

        def failed(output: str) -> FunctionCallResult:
            return self._result(call, index, call_id, secrets, FunctionCallStatus.FAILED, output)

        if index > self.max_calls:
            return failed(
                f"The call was not run: at most {self.max_calls} tool calls run per reply "
                f"(TANDEM_MAX_TOOL_CALLS) and this was call {index}. Ask for the most important "
                "calls first and fewer at a time."
            )
        if call.error:
            if call_id is not None:  # a native call: no <function_call> block to correct
                return failed(
                    f"The call was not run: {call.error}. Call {call.name!r} again with arguments "
                    "that are a JSON object matching its parameters."
                )
            return failed(format_parse_error(call))
        try:
            text = json.dumps(call.args, ensure_ascii=False, default=str)
            size = len(text.encode("utf-8", "surrogatepass"))
        except Exception:
            size = self.max_args_bytes + 1
        if size > self.max_args_bytes:
            return failed(
                f"The call was not run: its arguments are {size} bytes of JSON, over the limit of "
                f"{self.max_args_bytes} (TANDEM_MAX_TOOL_ARGS_BYTES). Send smaller arguments."
            )
        tool = tools.get(call.name)
        if tool is None:
            valid = ", ".join(sorted(tools)) or "(no tools are available in this step)"
            return failed(f"There is no tool named {call.name!r}. Valid tool names: {valid}.")
        if tool.requires_approval and not approved:
            return failed(
                f"The call was not run: {tool.name!r} needs a person's approval and none was given "
                "for this call. Take another way or ask the user."
            )
        try:
            args = tool.validate_args(call.args, on_injected=self.on_injected)
        except ToolArgumentsError as exc:
            return failed(
                f"Invalid arguments for {tool.name!r}: field {exc.field!r}: {exc.reason}. "
                "Fix this argument and call the tool again."
            )
        except Exception as exc:  # e.g. an MCP server's input schema that is not valid JSON Schema
            return failed(
                f"{tool.name!r} was not run: its arguments could not be checked ({_describe_error(exc)}); "
                "the tool's definition is broken, use another tool."
            )
        hung = hung_tools.count()
        if hung >= self.max_hung:
            return failed(
                f"{tool.name!r} was not run: {hung} earlier tool calls in this worker are still running "
                f"past their timeout (limit TANDEM_MAX_HUNG_TOOLS={self.max_hung}). Try again later or "
                "without this tool."
            )
        return tool, args
