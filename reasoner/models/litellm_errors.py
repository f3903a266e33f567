"""Reading LiteLLM's exceptions: what failed (status, connection, timeout), the provider's own
message, and the ``Retry-After`` a host asked for.

LiteLLM maps status codes to exception classes loosely (403 arrives as a generic ``APIError``, a
refused connection as ``InternalServerError`` with a made-up 500), so tandem classifies by the
status code and by the ``httpx`` error found down the exception chain, not by class.

A success answer that holds no chat completion (an HTML page a proxy answered with, JSON cut
short, an empty body, JSON of another shape, an event stream without chunks) is transient too, but
bounded: ``translate`` makes it a ``MalformedReplyError``, which the model service retries itself,
with back-off, ``max_retries`` times, and then fails with ``final``'s error saying what the host
sent (an excerpt, redacted), how many tries, and what to check. It is never handed to a caller
that would reschedule it: a host that always answers so would then hold the job until its deadline.
"""

from __future__ import annotations

import ast
import email.utils
import json
import logging
import math
import re
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from tandem.reasoner.errors import ModelCallError, TransientModelError
from tandem.reasoner.models.direct_http import HostReplyError, UnreadableReply, json_failure
from tandem.reasoner.models.refusals import refusal, summary

if TYPE_CHECKING:
    from tandem.reasoner.models.retry_policy import RetryPolicy

logger = logging.getLogger(__name__)

_PROVIDER_PREFIX = re.compile(
    r"^\s*(?:litellm\.\w+:\s*|\w+(?: Error)?:\s*|\w+Error\s+-\s*|[\w.\-]+Exception\s*-\s*)"
)
_ERROR_CODE = re.compile(r"Error code: \d+ - (.*)$", re.DOTALL)
TRANSIENT_STATUSES = frozenset({408, 409, 429})
"""The 4xx answers retried (a time-out, a conflict, a rate limit); other 4xx fail the call at once."""
_CALL_FAILURES = (ModelCallError, HostReplyError, UnreadableReply, ConnectionError, TimeoutError)


def shown_host(api_base: str | None) -> str:
    """How errors and logs name a host: its ``api_base`` with the password masked, or
    ``"provider default"``."""
    if not api_base:
        return "provider default"
    from tandem.toolkit.redaction import masked_url  # the toolkit's import costs: only when shown

    return masked_url(api_base)


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
        getattr(exc, "headers", None),  # tandem.reasoner.models.direct_http.HostReplyError
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

    if isinstance(exc, (*_CALL_FAILURES, httpx.HTTPError)):
        return True
    module = type(exc).__module__
    return module.startswith(("litellm", "openai")) or any(
        cls.__module__.startswith("openai") for cls in type(exc).__mro__
    )


def advice(
    kind: str,
    status: int | None,
    exc: BaseException,
    *,
    role: str | None,
    timeout: float,
    refused: str | None = None,
) -> str:
    """What to do about a failure, naming the ``TANDEM_<ROLE>_*`` setting (or argument) to check;
    ``refused``: the kind of refusal the host's words are (``tandem.reasoner.models.refusals``)."""
    setting = f"TANDEM_{role.upper()}" if role else "TANDEM_<ROLE>"
    if kind == "timeout" or status == 408:
        return (
            f"no answer within the call's {timeout:g}s: raise {setting}_TIMEOUT (timeout=) "
            "or check how loaded the host is"
        )
    if kind == "connection":
        return (
            "the connection failed or broke: check that the host is running and reachable and "
            f"that {setting}_API_BASE (api_base=) is right"
        )
    if refused is not None:
        return _REFUSAL_ADVICE[refused].format(setting=setting)
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
        return "the host is rate limiting: lower the number of concurrent workers or raise the host's limits"
    if status in (400, 422):
        return (
            "the host refused the request: check the parameters this model accepts "
            f"({setting}_TEMPERATURE, {setting}_MAX_TOKENS, tools, extra_body)"
        )
    if status == 504:
        return "a gateway in front of the model timed out: check the host's load and the gateway's timeout"
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
    host = shown_host(api_base)
    if isinstance(exc, ModelCallError):
        return exc
    bad = unreadable(exc)
    if bad is not None:
        return MalformedReplyError(bad, model=model, api_base=api_base, api_key=api_key, role=role)
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
    said = summary(provider_message(exc)).rstrip(". ")
    refused = refusal(said, status, type(exc).__name__) if kind == "http" else None
    if refused is not None:  # the host's words say no retry will change its answer
        transient = False
    no_key = not api_key and _NO_KEY.search(said) is not None
    if no_key:  # LiteLLM found no key for the provider: no retry (or wait) brings one
        transient = False
    url_auth = _URL_AUTH.search(said) is not None
    if url_auth:  # the URL's credentials beside LiteLLM's own Authorization header: every try alike
        transient = False
    what = {
        "timeout": "timed out",
        "connection": "connection failed",
    }.get(kind, f"HTTP {status}" if status is not None else type(exc).__name__)
    if len(said) > 600:
        said = said[:600] + "…"
    if not said and kind == "timeout":  # the advice says what: no answer in time
        message = f"model {model!r} at {host}: {what}"
    else:
        message = f"model {model!r} at {host}: {what}: {said or '(no message)'}"
    if transient and attempts > 1:
        message += f" (after {attempts} attempts)"
    todo = advice(kind, status, exc, role=role, timeout=timeout, refused=refused)
    if no_key:
        setting = f"TANDEM_{role.upper()}" if role else "TANDEM_<ROLE>"
        todo = (
            f"no API key was given: set {setting}_API_KEY (api_key=); for a host that checks "
            "none, any value will do"
        )
    if url_auth:
        setting = f"TANDEM_{role.upper()}" if role else "TANDEM_<ROLE>"
        todo = (
            f"{setting}_API_BASE (api_base=) holds a user and password, which LiteLLM cannot send "
            "beside its own Authorization header: such a host is reached by a worker's direct calls "
            "(a hosted_vllm/<name> model, no API key), see docs/model-hosts.md"
        )
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


_REFUSAL_ADVICE = {
    "context": (
        "the conversation does not fit the model's context window: shorten the job's goal or "
        "context, lower {setting}_MAX_TOKENS, start the host with a larger context (llama.cpp: "
        "--n_ctx or -c; vLLM: --max-model-len), or use a model with a larger window"
    ),
    "validation": (
        "the host's request schema refused the request (a retry sends the same): check that "
        "{setting}_API_BASE is an OpenAI-compatible chat API and the host's version, and report "
        "the message above to tandem if it names a field tandem sent"
    ),
    "template": (
        "the host's chat template failed on the request (a retry sends the same): start the host "
        "with a chat format that takes tool calls (llama-cpp-python: --chat_format "
        "chatml-function-calling), or set {setting}_FUNCTION_CALLING=prompt"
    ),
    "unsupported": (
        "the host does not serve what the request asks (a retry sends the same): see its words "
        "above; {setting}_STREAM, {setting}_TOOL_CHOICE and {setting}_FUNCTION_CALLING change "
        "what tandem asks"
    ),
}
"""What to do about each kind of refusal (``tandem.reasoner.models.refusals``)."""

_URL_AUTH = re.compile(r"Cannot combine AUTHORIZATION header", re.IGNORECASE)
"""How aiohttp (under LiteLLM) refuses a URL's ``user:password`` beside an ``Authorization``
header (``tandem.reasoner.host_auth``)."""

_NO_KEY = re.compile(r"Missing credentials|api_key client option must be set", re.IGNORECASE)
"""How LiteLLM (and the OpenAI SDK under it) say that no API key was found for the provider: it
comes as HTTP 500, which would otherwise be retried until the job's deadline."""

# -- success answers that hold no chat completion -------------------------------------------

_LITELLM_UNREADABLE = (
    # (LiteLLM's or the OpenAI SDK's words, what follows them, the kind when no body is found)
    ("Empty or invalid response from LLM endpoint", "Received: ", "not-json"),
    ("Unable to get json response", "Original Response: ", "not-json"),
    ("provider returned a response with no 'choices'", "Raw keys: ", "not-completion"),
    ("Stream ended before a finish_reason was received", "", "cut-stream"),
)
EXCERPT_CHARS = 160
"""Characters of an unreadable answer an error message quotes."""


def unreadable(exc: BaseException) -> UnreadableReply | None:
    """What the host sent when ``exc`` says a success answer held no chat completion (tandem's own
    ``UnreadableReply``, or LiteLLM's and the OpenAI SDK's ways of saying it); ``None`` for any
    other failure. An answer with an error status, a connection failure or a time-out is never one.
    """
    import httpx

    chain = list(cause_chain(exc))
    for link in chain:
        if isinstance(link, UnreadableReply):
            return link
    if failure_kind(exc) != "http" or any(isinstance(link, httpx.HTTPStatusError) for link in chain):
        return None
    content_type = response_headers(exc).get("content-type", "")
    for link in chain:
        if isinstance(link, json.JSONDecodeError) and isinstance(link.doc, str):
            return UnreadableReply(json_failure(link.doc), link.doc, content_type)
    text = str(getattr(exc, "message", "") or exc)
    for words, before, kind in _LITELLM_UNREADABLE:
        if words in text:
            body = text.split(before, 1)[1] if before and before in text else ""
            if body.startswith("'") and "'. Check the reverse proxy" in body:  # LiteLLM's quoting
                body = body[1:].rsplit("'. Check the reverse proxy", 1)[0]
            if kind == "not-json" and body:
                kind = json_failure(body)
            return UnreadableReply(kind, body, content_type)
    if getattr(exc, "status_code", None) == 200:  # LiteLLM failed on an answer the host sent with 200
        return UnreadableReply("unreadable", provider_message(exc), content_type)
    return None


def excerpt(body: str, api_key: str | None = None) -> str:
    """The start of ``body`` for an error message: whitespace runs as one space, at most
    ``EXCERPT_CHARS`` characters, secrets (and ``api_key``) masked, quoted."""
    from tandem.toolkit.redaction import redact  # the toolkit's import costs: only when it fails

    flat = " ".join(body[: EXCERPT_CHARS * 4].split())
    cut = flat[:EXCERPT_CHARS] + ("…" if len(flat) > EXCERPT_CHARS or len(body) > EXCERPT_CHARS * 4 else "")
    return repr(redact(cut, [api_key] if api_key else []))


def unreadable_advice(reply: UnreadableReply, role: str | None) -> str:
    """What to check when a host's success answers hold no chat completion."""
    setting = f"TANDEM_{role.upper()}" if role else "TANDEM_<ROLE>"
    if reply.kind in ("not-json", "not-stream", "unreadable"):
        return (
            "a proxy, gateway or login page may be answering instead of the model server: check that "
            f"{setting}_API_BASE (api_base=) is the server's OpenAI-compatible /v1 address, and the "
            "proxy's and the host's logs"
        )
    if reply.kind == "not-completion":
        return (
            f"check that {setting}_API_BASE (api_base=) is the host's OpenAI-compatible /v1 address "
            "(not another API of the host), and the host's logs"
        )
    return (
        "the answer was cut short or lost on the way: check the host's logs and those of any proxy "
        "in between (a crash, a restart, a limit on the answer's size or time)"
    )


class MalformedReplyError(TransientModelError):
    """A success answer held no chat completion (``reply``): transient, retried by the model
    service itself a bounded number of times (``next_wait``), then ``final``."""

    def __init__(
        self,
        reply: UnreadableReply,
        *,
        model: str,
        api_base: str | None,
        api_key: str | None = None,
        role: str | None = None,
    ) -> None:
        self.reply = reply
        self.head = f"model {model!r} at {shown_host(api_base)}"
        self.sent = f"HTTP {reply.status} with {reply.what}"
        if reply.body.strip():
            self.sent += f": {excerpt(reply.body, api_key)}"
        todo = unreadable_advice(reply, role)
        self.todo = f"{todo[0].upper()}{todo[1:]}."
        super().__init__(
            f"{self.head}: the host answered {self.sent}. {self.todo}",
            model=model,
            api_base=api_base,
            status_code=reply.status,
        )

    def final(self, tries: int) -> ModelCallError:
        """The error a call fails with after ``tries`` answers without a chat completion."""
        return ModelCallError(
            f"{self.head}: no chat completion in {tries} tr{'y' if tries == 1 else 'ies'} in a row; "
            f"the last answer was {self.sent}. {self.todo}",
            model=self.model,
            api_base=self.api_base,
            status_code=self.status_code,
        )

    def next_wait(self, policy: RetryPolicy, attempt: int, held: float) -> float:
        """Seconds to wait before the next try, after try ``attempt`` (from 0) got this answer and
        the call waited ``held`` seconds in all; raises ``final`` once ``policy.max_retries``
        retries are spent.

        The wait is ``policy``'s back-off, shortened to what its ``max_hold`` leaves, never
        refused: a refused wait would hand the error to a caller that reschedules the step, the
        count would start again there, and a host that always answers so would hold the job until
        its deadline.
        """
        if not policy.can_retry(attempt):
            raise self.final(attempt + 1)
        wait = policy.delay(attempt, None)  # the jittered back-off (None: longer than the hold)
        left = math.inf if policy.max_hold is None else max(policy.max_hold - held, 0.0)
        wait = min(left if wait is None else wait, left)
        logger.warning(
            "%s: try %d of %d got no chat completion (%s); trying again in %.2fs",
            self.head,
            attempt + 1,
            policy.max_retries + 1,
            self.reply.what,
            wait,
        )
        return wait
