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

from tandem.reasoner.direct_http import HostReplyError
from tandem.reasoner.errors import ModelCallError, TransientModelError

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
        getattr(exc, "headers", None),  # tandem.reasoner.direct_http.HostReplyError
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


def is_call_failure(exc: BaseException) -> bool:
    """Errors of the call itself (LiteLLM/OpenAI/HTTP), as opposed to bugs or a listener's error."""
    import httpx

    if isinstance(exc, ModelCallError | HostReplyError | httpx.HTTPError | ConnectionError | TimeoutError):
        return True
    module = type(exc).__module__
    return module.startswith(("litellm", "openai")) or any(
        cls.__module__.startswith("openai") for cls in type(exc).__mro__
    )


def advice(kind: str, status: int | None, exc: BaseException, *, role: str | None, timeout: float) -> str:
    """What to do about a failure, naming the ``TANDEM_<ROLE>_*`` setting (or argument) to check."""
    setting = f"TANDEM_{role.upper()}" if role else "TANDEM_<ROLE>"
    if kind == "timeout" or status == 408:
        return (
            f"no answer within {timeout:g}s: raise {setting}_TIMEOUT (timeout=) "
            "or check how loaded the host is"
        )
    if kind == "connection":
        return (
            "the connection failed or broke: check that the host is running and reachable and "
            f"that {setting}_API_BASE (api_base=) is right"
        )
    if type(exc).__name__ == "ContextWindowExceededError":
        return (
            "the conversation does not fit the model's context window: shorten the task or its "
            f"context, lower {setting}_MAX_TOKENS, or use a model with a longer context"
        )
    if status == 401:
        return f"the host refused the credentials: check {setting}_API_KEY (api_key=)"
    if status == 403:
        return f"the API key may not use this model: check the key's permissions and {setting}_MODEL"
    if status == 404:
        return (
            f"check the model name ({setting}_MODEL: after the provider prefix comes a model the "
            f"host serves) and {setting}_API_BASE; GET <api_base>/models lists the host's models"
        )
    if status == 429:
        return (
            "the host is rate limiting: lower the number of concurrent workers or raise the host's limits"
        )
    if status in (400, 422):
        return (
            "the host refused the request: check the parameters this model accepts "
            f"({setting}_TEMPERATURE, {setting}_MAX_TOKENS, tools, extra_body)"
        )
    if status == 504:
        return (
            "a gateway in front of the model timed out: check the host's load and the gateway's timeout"
        )
    if status is not None and status >= 500:
        return "the host failed: check its logs and health"
    return "check the model settings and the host"

def translate(
    exc: BaseException,
    *,
    attempts: int,
    model: str,
    api_base: str | None,
    api_key: str | None = None,
    role: str | None = None,
    timeout: float = 60.0,
) -> ModelCallError:
    """The ``ModelCallError`` (or ``TransientModelError``) describing ``exc``.

    The message names the model, the host, what failed, the provider's words and what to do; the
    API key never appears in it.
    """
    host = api_base or "provider default"
    if isinstance(exc, ModelCallError):
        return exc
    kind = failure_kind(exc)
    raw_status = getattr(exc, "status_code", None)
    status = raw_status if kind == "http" and isinstance(raw_status, int) else None
    transient = kind != "http" or (status is not None and (status in TRANSIENT_STATUSES or status >= 500))
    if kind == "http" and status is None:
        # no status at all: a LiteLLM-internal failure class; connection-like ones may pass
        transient = type(exc).__name__ in (
            "APIConnectionError",
            "ServiceUnavailableError",
            "InternalServerError",
        )
    what = {
        "timeout": "timed out",
        "connection": "connection failed",
    }.get(kind, f"HTTP {status}" if status is not None else type(exc).__name__)
    said = provider_message(exc).rstrip(". ")
    if len(said) > 600:
        said = said[:600] + "…"
    message = f"model {model!r} at {host}: {what}: {said or '(no message)'}"
    if transient and attempts > 1:
        message += f" (after {attempts} attempts)"
    todo = advice(kind, status, exc, role=role, timeout=timeout)
    message = f"{message}. {todo[0].upper()}{todo[1:]}."
    if api_key and len(api_key) >= 4:
        message = message.replace(api_key, "***")
    if transient:
        headers = response_headers(exc)
        return TransientModelError(
            message,
            retry_after=parse_retry_after(headers) if headers else None,
            model=model,
            api_base=api_base,
            status_code=status,
        )
    return ModelCallError(message, model=model, api_base=api_base, status_code=status)
