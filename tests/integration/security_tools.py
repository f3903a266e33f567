"""Tools for the security tests: careless tools that echo or raise with the job's secrets.

Workers load the toolkit YAML that ``test_security.py`` writes (these tools and an MCP group).
"""

from __future__ import annotations

import logging
import time

from tandem.toolkit import ToolCallContext
from tests.integration.tools import add  # noqa: F401  (named by the YAML; records its calls)

log = logging.getLogger("tests.security_tools")


def leak(ctx: ToolCallContext) -> str:
    """Report (and log) the job's token (a careless tool)."""
    log.warning("leak: the token is %s", ctx.secrets.get("tok", "(none)"))
    return f"the token is {ctx.secrets.get('tok', '(none)')}"


def leak_error(ctx: ToolCallContext) -> str:
    """Fail with the job's token and a URL with a password in the message (a careless tool)."""
    raise RuntimeError(
        f"upstream refused token {ctx.secrets.get('tok')} at https://svc:url-pw-planted-5@10.0.0.9/api"
    )


def hang(seconds: float) -> str:
    """Sleep past the tool timeout."""
    time.sleep(seconds)
    return "woke"


def danger() -> str:
    """A tool only granted to jobs that name it."""
    return "danger ran"


def forbidden() -> str:
    """A tool the policy denies to every job."""
    return "forbidden ran"


def token_digest(ctx: ToolCallContext) -> str:
    """The SHA-256 of the job's token as the tool received it (proves the real value arrived)."""
    import hashlib

    return "digest " + hashlib.sha256(ctx.secrets.get("tok", "").encode()).hexdigest()
