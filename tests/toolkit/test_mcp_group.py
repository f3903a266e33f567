"""``McpToolGroup`` against the real MCP server in ``tests/toolkit/mcp_server.py`` (stdio and HTTP)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tandem.toolkit import McpCallError, McpToolError, McpToolGroup, ToolkitError
from tandem.toolkit.errors import ToolArgumentsError
from tandem.toolkit.mcp_group import CLOSE_GRACE

SERVER = str(Path(__file__).with_name("mcp_server.py"))

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def group() -> McpToolGroup:
    return McpToolGroup("calc", command=sys.executable, args=[SERVER], timeout=20.0)


def test_lists_tools_with_their_schemas(group: McpToolGroup) -> None:
    tools = {t.name: t for t in group.tools()}
    assert sorted(tools) == ["add", "fail", "slow", "stats"]
    add = tools["add"]
    assert add.description == "Add two integers."
    assert add.parameters["required"] == ["a", "b"]
    assert add.parameters["properties"]["a"]["type"] == "integer"
    assert add.openai_schema()["function"]["parameters"] is add.parameters
    assert add.timeout == pytest.approx(20.0 + CLOSE_GRACE)


def test_listing_is_cached_until_refresh(group: McpToolGroup) -> None:
    first = group.tools()
    assert [id(t) for t in group.tools()] == [id(t) for t in first]
    group.refresh()
    again = group.tools()
    assert [t.name for t in again] == [t.name for t in first]
    assert again[0] is not first[0]


def test_call_returns_text(group: McpToolGroup) -> None:
    add = next(t for t in group.tools() if t.name == "add")
    assert add.invoke(add.validate_args({"a": 2, "b": 40})) == "42"


def test_structured_result_is_text_the_model_can_read(group: McpToolGroup) -> None:
    stats = next(t for t in group.tools() if t.name == "stats")
    out = stats.invoke({"values": [1, 2, 3]})
    assert '"count": 3.0' in out and '"total": 6.0' in out


def test_arguments_are_checked_against_the_server_schema(group: McpToolGroup) -> None:
    add = next(t for t in group.tools() if t.name == "add")
    with pytest.raises(ToolArgumentsError, match="'a'"):
        add.validate_args({"a": "two", "b": 1})
    with pytest.raises(ToolArgumentsError, match="'b' is a required property"):
        add.validate_args({"a": 1})


def test_is_error_raises_with_the_server_text(group: McpToolGroup) -> None:
    fail = next(t for t in group.tools() if t.name == "fail")
    with pytest.raises(McpToolError, match="refused: no thanks") as info:
        fail.invoke({"reason": "no thanks"})
    assert info.value.tool == "fail"


def test_timeout(group: McpToolGroup) -> None:
    quick = McpToolGroup("quick", command=sys.executable, args=[SERVER], timeout=60.0)
    slow = next(t for t in quick.tools() if t.name == "slow")  # listed without a hurry on a busy machine
    quick.timeout = 3.0
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="did not finish within 3 s"):
        slow.invoke({"seconds": 30})
    assert time.monotonic() - started < 3.0 + CLOSE_GRACE + 2.0


def test_calls_from_many_threads_and_from_inside_a_loop(group: McpToolGroup) -> None:
    add = next(t for t in group.tools() if t.name == "add")
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda i: add.invoke({"a": i, "b": 1}), range(3)))
    assert results == ["1", "2", "3"]

    async def inside_a_running_loop() -> str:
        return add.invoke({"a": 5, "b": 5})

    assert asyncio.run(inside_a_running_loop()) == "10"


def test_unreachable_server_names_the_group() -> None:
    broken = McpToolGroup("ghost", command="/nonexistent/tandem-mcp-server", timeout=5.0)
    with pytest.raises(McpCallError, match=r"'ghost'.*nonexistent"):
        broken.tools()
    dying = McpToolGroup("dying", command=sys.executable, args=["-c", "import sys; sys.exit(3)"], timeout=5)
    with pytest.raises(McpCallError, match="'dying'"):
        dying.tools()


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"transport": "stdio"}, id="stdio-without-command"),
        pytest.param({"transport": "streamable-http"}, id="http-without-url"),
        pytest.param({"transport": "sse", "url": "http://x"}, id="unknown-transport"),
        pytest.param({"command": "x", "timeout": 0}, id="zero-timeout"),
    ],
)
def test_bad_settings(kwargs: dict) -> None:
    with pytest.raises(ToolkitError, match="MCP group 'bad'"):
        McpToolGroup("bad", **kwargs)


def test_failed_call_becomes_a_failed_result_in_the_tool_runner(group: McpToolGroup) -> None:
    runner_module = pytest.importorskip("tandem.reasoner.tool_runner")
    parsing = pytest.importorskip("tandem.reasoner.function_calling")
    tools = {t.name: t for t in group.tools()}
    call = parsing.ParsedFunctionCall(name="fail", call_objective="try", args={"reason": "nope"})
    result = runner_module.ToolRunner().run_call(tools, call, 1)
    assert result.status.name == "FAILED"
    assert "refused: nope" in result.output


# -- streamable HTTP ----------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, SERVER, "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("the HTTP MCP test server did not start")
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_streamable_http(http_url: str) -> None:
    remote = McpToolGroup(
        "web", transport="streamable-http", url=http_url, headers={"X-Tandem": "test"}, prefix="web."
    )
    tools = {t.name: t for t in remote.tools()}
    assert sorted(tools) == ["web.add", "web.fail", "web.slow", "web.stats"]
    assert tools["web.add"].invoke({"a": 20, "b": 22}) == "42"
    with pytest.raises(McpToolError, match="refused: boom"):
        tools["web.fail"].invoke({})


def test_an_mcp_tool_is_awaited_in_the_running_loop(group: McpToolGroup) -> None:
    import asyncio
    import threading

    add = next(t for t in group.tools() if t.name == "add")
    assert add.async_function is not None

    async def call() -> tuple[str, set[str]]:
        before = {t.name for t in threading.enumerate()}
        out = await add.ainvoke(add.validate_args({"a": 2, "b": 40}))
        return out, {t.name for t in threading.enumerate()} - before

    out, new_threads = asyncio.run(call())
    assert out == "42"
    assert not any(name.startswith(("tandem-mcp", "asyncio_")) for name in new_threads), new_threads
