"""``McpToolGroup``: the tools of one MCP server as toolkit tools, on the ``mcp`` SDK (2.x).

Cost, by design: **every call opens its own session** and closes it before returning; over
stdio that means the server process is started (and stopped) for each call. Tools run inside
Celery worker processes, on whatever thread the tool runner picks, with a fresh event loop
per call (``asyncio.run``); a session is bound to the loop and task that opened it, so a
session shared between calls would tie every call to one thread and one process and would
have to survive worker restarts and forks. One session per call is always correct; servers
that are slow to start are better served over streamable HTTP, where a "session" is a few
HTTP requests to a server that keeps running.

The listing (``tools()``) also opens a session, once, and is cached until ``refresh()``.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import urlsplit

import anyio

from tandem.toolkit.errors import ToolDefinitionError

if TYPE_CHECKING:  # the SDK takes ~0.7 s to import: loaded on first use, not by every worker
    import mcp_types
    from mcp import Client

from tandem.toolkit.errors import McpCallError, McpToolError
from tandem.toolkit.group import ToolGroup
from tandem.toolkit.output import cut_note, render_head
from tandem.toolkit.redaction import redact_head, register_secret, register_url
from tandem.toolkit.tool import Tool

McpTransport = Literal["stdio", "streamable-http"]

CLOSE_GRACE = 6.0
"""Seconds a closing stdio session may take (the SDK waits 2 s for exit, 2 s after SIGTERM, then kills)."""

_MAX_ERROR_CHARS = 2000
"""The most characters of a failed session's error kept in ``McpCallError``."""

_T = TypeVar("_T")


def run_coroutine_sync(factory: Callable[[], Awaitable[_T]]) -> _T:
    """Run the coroutine made by ``factory`` to completion from synchronous code, on any thread.

    With no event loop running in this thread it uses ``asyncio.run``; inside a running loop
    (where ``asyncio.run`` is refused) it runs on a short-lived helper thread and waits.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_as_coroutine(factory()))
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(_as_coroutine(factory()))
        except BaseException as exc:
            box["error"] = exc

    helper = threading.Thread(target=target, name="tandem-mcp", daemon=True)
    helper.start()
    helper.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


async def _as_coroutine(awaitable: Awaitable[_T]) -> _T:
    return await awaitable


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside (possibly nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


MAX_RESULT_CHARS = 1_000_000
"""The most characters of one MCP result (or error) kept as text; the tool runner cuts it further,
to ``TANDEM_MAX_OUTPUT_CHARS``, for the model. A longer result is cut here, before any redaction or
parsing, and says so."""


def _block_text(block: Any) -> str:
    import mcp_types

    if isinstance(block, mcp_types.TextContent):
        return block.text
    if isinstance(block, mcp_types.EmbeddedResource):
        inner = block.resource
        text = getattr(inner, "text", None)
        return text if isinstance(text, str) else f"[binary resource {inner.uri}]"
    if isinstance(block, mcp_types.ResourceLink):
        return f"[resource {block.uri}]"
    mime = getattr(block, "mime_type", "") or ""
    return f"[{block.type} content{' ' + mime if mime else ''} omitted]"


def result_text(result: mcp_types.CallToolResult, limit: int = MAX_RESULT_CHARS) -> str:
    """A call result as text: text blocks joined by newlines; structured content as JSON if no text.

    Embedded text resources count as text; images, audio and binary resources are named in a
    placeholder, since the model reading the result gets text only. Only the first ``limit``
    characters are joined or rendered (``limit <= 0``: all); a note then says how long it was.
    """
    parts: list[str] = []
    size = -1  # the joined text's length: a newline between blocks
    for block in result.content:
        text = _block_text(block)
        if limit <= 0 or size < limit:
            parts.append(text if limit <= 0 else text[: limit + 1])
        size += 1 + len(text)
    if not any(p.strip() for p in parts) and result.structured_content is not None:
        shown, total = render_head(result.structured_content, limit)
        whole = total is not None and total <= len(shown)
        return shown if whole else shown + cut_note(limit, total, len(shown))
    joined = "\n".join(parts)
    if 0 < limit < size:
        return joined[:limit] + cut_note(limit, size, size)
    return joined


class McpToolGroup(ToolGroup):
    """The tools of one MCP server, reached over stdio (``command``/``args``) or streamable HTTP (``url``).

    ``tools()`` lists the server's tools once (opening a session) and caches them as
    ``toolkit.Tool`` objects named ``prefix + <server's name>``, with the server's input
    schema as ``schema`` (arguments are checked with jsonschema before the call). Calling one
    opens a session, calls, and closes it (see the module docstring for why), all within
    ``timeout`` seconds; the tool's own ``timeout`` is that plus ``CLOSE_GRACE`` so the
    runner's limit never fires first. A result with ``isError`` raises ``McpToolError``
    carrying the server's text; a server that cannot be started or reached raises
    ``McpCallError``; running out of time raises ``TimeoutError``.

    Over stdio, ``env`` holds extra variables merged over the SDK's safe defaults (``PATH``,
    ``HOME``, ...); the worker's other variables are not passed to the server. Over HTTP,
    ``headers`` go with every request.
    """

    def __init__(
        self,
        name: str,
        transport: McpTransport = "stdio",
        command: str | None = None,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        url: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 30.0,
        *,
        description: str = "",
        prefix: str = "",
    ) -> None:
        super().__init__(name, description)
        if transport == "stdio":
            if not command:
                raise ToolDefinitionError(f"MCP group {name!r}: transport 'stdio' needs a command")
        elif transport == "streamable-http":
            if not url:
                raise ToolDefinitionError(f"MCP group {name!r}: transport 'streamable-http' needs a url")
        else:
            raise ToolDefinitionError(
                f"MCP group {name!r}: transport must be 'stdio' or 'streamable-http', got {transport!r}"
            )
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ToolDefinitionError(
                f"MCP group {name!r}: timeout must be a positive number, got {timeout!r}"
            )
        self.transport: McpTransport = transport
        self.command = command
        self.args = [str(a) for a in args]
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.url = url
        self.headers = dict(headers) if headers is not None else None
        self.timeout = float(timeout)
        self.prefix = prefix
        self._lock = threading.Lock()
        self._tools: list[Tool] | None = None
        # Whatever may hold a credential is masked in every message from here on.
        register_secret(*(self.env or {}).values(), *(self.headers or {}).values())
        register_url(self.url)

    def where(self) -> str:
        """The server, for messages: the program (not its arguments, which may hold tokens) or the
        URL's scheme, host and path (not its user, password or query)."""
        if self.transport == "stdio":
            program = os.path.basename(str(self.command))
            return f"{program} with {len(self.args)} argument{'s' if len(self.args) != 1 else ''}"
        parts = urlsplit(str(self.url))
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{host}{port}{parts.path}"

    # -- sessions -------------------------------------------------------------------------

    @asynccontextmanager
    async def session(self) -> AsyncIterator[Client]:
        """An open ``mcp.Client`` to the server, closed (and a stdio server stopped) on exit."""
        from mcp import Client, StdioServerParameters

        if self.transport == "stdio":
            assert self.command is not None
            params = StdioServerParameters(command=self.command, args=self.args, env=self.env, cwd=self.cwd)
            async with Client(params, read_timeout_seconds=self.timeout, cache=None) as client:
                yield client
            return
        import httpx2  # the HTTP client the mcp SDK is built on
        from mcp.client.streamable_http import streamable_http_client

        assert self.url is not None
        http_timeout = httpx2.Timeout(self.timeout, read=self.timeout)
        async with (
            httpx2.AsyncClient(headers=self.headers, timeout=http_timeout) as http,
            Client(
                streamable_http_client(self.url, http_client=http),
                read_timeout_seconds=self.timeout,
                cache=None,
            ) as client,
        ):
            yield client

    async def _bounded(self, what: str, work: Callable[[Client], Awaitable[_T]]) -> _T:
        """Open a session, run ``work`` on it and close it, all within ``timeout``."""
        try:
            with anyio.fail_after(self.timeout):
                async with self.session() as client:
                    return await work(client)
        except McpCallError:
            raise
        except Exception as exc:
            leaf = _leaf(exc)
            if isinstance(leaf, TimeoutError):
                raise TimeoutError(
                    f"{what} on MCP server {self.name!r} did not finish within {self.timeout:g} s"
                ) from None
            if isinstance(leaf, McpCallError):
                raise leaf from None
            # cut before it is redacted: a server's error may hold a page of any size
            detail = redact_head(str(leaf) or type(leaf).__name__, _MAX_ERROR_CHARS, self.args)
            raise McpCallError(
                f"{what} on MCP server {self.name!r} ({self.transport}: {self.where()}) failed: "
                f"{type(leaf).__name__}: {detail}"
            ) from exc

    # -- listing --------------------------------------------------------------------------

    async def list_remote(self) -> list[mcp_types.Tool]:
        """Every tool the server lists (all pages), as the SDK's ``Tool`` models."""

        async def work(client: Client) -> list[mcp_types.Tool]:
            found: list[mcp_types.Tool] = []
            cursor: str | None = None
            for _ in range(1000):
                page = await client.list_tools(cursor=cursor)
                found.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    break
            return found

        return await self._bounded("listing the tools", work)

    def tools(self) -> list[Tool]:
        """The server's tools as toolkit tools; the first call asks the server, later ones reuse that."""
        with self._lock:
            if self._tools is None:
                remote = run_coroutine_sync(self.list_remote)
                self._tools = [self._make_tool(t) for t in remote]
            return list(self._tools)

    def refresh(self) -> None:
        """Forget the cached listing; the next ``tools()`` asks the server again."""
        with self._lock:
            self._tools = None

    def _make_tool(self, remote: mcp_types.Tool) -> Tool:
        remote_name = remote.name

        def call_mcp_tool(**arguments: Any) -> str:
            return self.call(remote_name, arguments)

        async def acall_mcp_tool(**arguments: Any) -> str:  # what ``Tool.ainvoke`` awaits
            return await self.call_async(remote_name, arguments)

        call_mcp_tool.__name__ = f"{self.prefix}{remote_name}"
        call_mcp_tool.__doc__ = remote.description
        schema = dict(remote.input_schema) if remote.input_schema else {"type": "object", "properties": {}}
        return Tool(
            name=f"{self.prefix}{remote_name}",
            description=remote.description or remote.title or "",
            function=call_mcp_tool,
            async_function=acall_mcp_tool,
            schema=schema,
            timeout=self.timeout + CLOSE_GRACE,
        )

    # -- calling --------------------------------------------------------------------------

    async def call_async(self, tool_name: str, arguments: Mapping[str, Any]) -> str:
        """Call the server's tool ``tool_name`` (its own name, no prefix) in a session of its own.

        Returns the result as text (see ``result_text``); raises ``McpToolError``,
        ``McpCallError`` or ``TimeoutError`` as the class docstring says.
        """

        async def work(client: Client) -> mcp_types.CallToolResult:
            return await client.call_tool(tool_name, dict(arguments))

        result = await self._bounded(f"calling the tool {tool_name!r}", work)
        text = result_text(result)
        if result.is_error:
            raise McpToolError(tool_name, text)
        return text

    def call(self, tool_name: str, arguments: Mapping[str, Any]) -> str:
        """``call_async`` from synchronous code; safe on any thread, with or without a running loop."""
        return run_coroutine_sync(lambda: self.call_async(tool_name, arguments))
