"""Reading LiteLLM's exceptions: what failed (status, connection, timeout), the provider's own
message, and the ``Retry-After`` a host asked for.

LiteLLM maps status codes to exception classes loosely (403 arrives as a generic ``APIError``, a
refused connection as ``InternalServerError`` with a made-up 500), so tandem classifies by the
status code and by the ``httpx`` error found down the exception chain, not by class.
"""

from __future__ import annotations

import ast
import email.utils
import json
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any

_PROVIDER_PREFIX = re.compile(
    r"^\s*(?:litellm\.\w+:\s*|\w+(?: Error)?:\s*|\w+Error\s+-\s*|[\w.\-]+Exception\s*-\s*)"
)
_ERROR_CODE = re.compile(r"Error code: \d+ - (.*)$", re.DOTALL)
TRANSIENT_STATUSES = frozenset({408, 429})


def cause_chain(exc: BaseException) -> Iterable[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def failure_kind(exc: BaseException) -> str:
    """``"timeout"``, ``"connection"`` or ``"http"``: what really happened under LiteLLM's class.

    LiteLLM reports a refused connection as ``InternalServerError`` (status 500) and a client
    time-out as ``Timeout`` (status 408); the exception chain still holds the ``httpx`` cause.
    """
    import httpx

    for link in cause_chain(exc):
        if isinstance(link, httpx.TimeoutException | TimeoutError):
            return "timeout"
        if isinstance(link, httpx.TransportError | ConnectionError):
            return "connection"
        name = type(link).__name__
        if name == "APITimeoutError" and getattr(link, "status_code", None) in (None, 408):
            return "timeout"
        if name == "APIConnectionError" and type(link).__module__.startswith("openai"):
            return "connection"
    return "http"


def response_headers(exc: BaseException) -> Mapping[str, str]:
    """The HTTP headers of the failed response, lower-cased.

    LiteLLM copies them to ``exc.litellm_response_headers`` (an ``httpx.Headers`` for
    ``openai/`` models, a ``dict`` for ``hosted_vllm/``); ``exc.response.headers`` is often an
    empty stand-in, so it is only the fallback.
    """
    for source in (
        getattr(exc, "litellm_response_headers", None),
        getattr(getattr(exc, "response", None), "headers", None),
    ):
        if source:
            try:
                return {str(k).lower(): str(v) for k, v in dict(source).items()}
            except (TypeError, ValueError):
                continue
    return {}


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date)."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def provider_message(exc: BaseException) -> str:
    """The provider's own words, without LiteLLM's class-name prefixes or a JSON wrapper."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and isinstance(body.get("message"), str) and body["message"]:
        return str(body["message"])
    text = str(getattr(exc, "message", "") or exc)
    if "Error_str: " in text:  # LiteLLM's time-out wording repeats the SDK's message after this
        text = text.split("Error_str: ", 1)[1]
    for _ in range(5):
        stripped = _PROVIDER_PREFIX.sub("", text, count=1)
        if stripped == text:
            break
        text = stripped
    text = text.strip()
    coded = _ERROR_CODE.search(text)  # the OpenAI SDK's "Error code: 408 - {...}" (a Python repr)
    candidate = coded.group(1) if coded else text
    data: Any = None
    try:
        data = json.loads(candidate)
    except ValueError:
        try:
            data = ast.literal_eval(candidate) if candidate.startswith("{") else None
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            data = None
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):
            return error
    return text
