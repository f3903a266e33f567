"""MCP groups keep their credentials out of every message: errors name the program and the URL's
host and path, never the arguments, the user, the password or the query; ``env`` and ``headers``
values are registered for redaction."""

from __future__ import annotations

import sys

import pytest

from tandem.toolkit.errors import McpCallError
from tandem.toolkit.mcp_group import McpToolGroup
from tandem.toolkit.redaction import redact
from tandem.workers.embedded import free_port


def test_where_names_the_program_not_its_arguments() -> None:
    group = McpToolGroup("files", command="/usr/bin/python3", args=["-m", "srv", "--token=argtok-12345"])
    assert group.where() == "python3 with 3 arguments"


def test_where_drops_the_urls_credentials_and_query() -> None:
    group = McpToolGroup(
        "web", transport="streamable-http", url="https://bob:pw-in-url-9@mcp.example:8443/mcp?key=q-1"
    )
    assert group.where() == "https://mcp.example:8443/mcp"
    assert redact("failed at https://bob:pw-in-url-9@elsewhere/") == "failed at https://***@elsewhere/"
    assert "pw-in-url-9" not in redact("pw-in-url-9 leaked")


def test_env_and_header_values_are_registered() -> None:
    McpToolGroup("files", command="srv", env={"MCP_TOKEN": "env-token-777"})
    McpToolGroup("web", transport="streamable-http", url="http://h/mcp", headers={"X-Key": "hdr-key-888"})
    assert redact("env-token-777 and hdr-key-888") == "*** and ***"


def test_an_unreachable_http_server_error_holds_no_credentials() -> None:
    port = free_port()
    group = McpToolGroup(
        "web",
        transport="streamable-http",
        url=f"http://svc:pw-refused-5@127.0.0.1:{port}/mcp?token=tq-123456",
        timeout=10,
    )
    with pytest.raises(McpCallError) as caught:
        group.tools()
    message = str(caught.value)
    assert f"127.0.0.1:{port}/mcp" in message
    assert "pw-refused-5" not in message and "tq-123456" not in message


def test_a_failing_stdio_server_error_holds_no_arguments() -> None:
    group = McpToolGroup(
        "dying",
        command=sys.executable,
        args=["-c", "import sys; sys.exit(3)", "--token=argtok-555"],
        timeout=10,
    )
    with pytest.raises(McpCallError) as caught:
        group.tools()
    assert "argtok-555" not in str(caught.value) and "'dying'" in str(caught.value)
