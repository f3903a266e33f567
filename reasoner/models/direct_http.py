"""Chat completions sent straight to an OpenAI-compatible host, for the event loops that allow it.

LiteLLM costs about 2.8 ms of CPU a call on top of the HTTP itself (its request building, the
OpenAI SDK's response objects, cost and logging hooks); a worker making hundreds of calls at once
spends most of its CPU there. For a host that speaks the OpenAI wire protocol as it is (a model
string ``openai/<name>`` or ``hosted_vllm/<name>`` with an ``api_base``), the same request can be
posted with one ``aiohttp`` session per event loop for about 0.25 ms a call.

Only loops that ``allow`` it get sessions: a worker's ``ModelLoop`` does (and closes its session
when it stops); any other loop (a user's ``asyncio.run`` around ``arun``) keeps LiteLLM, so no
session outlives its loop. Streamed calls go the same way (``open_stream``): the host's event
stream is read line by line, each ``data:`` chunk handed on as an object with the attributes
LiteLLM's chunks have, so one ``StreamReader`` reads both.

Failures are raised as exceptions ``tandem.reasoner.models.litellm_errors`` reads like LiteLLM's: an
error answer is ``HostReplyError`` (status, headers, the provider's error object), a refused or
dropped connection ``HostConnectionError`` (a ``ConnectionError``), a time-out ``TimeoutError``,
and a success answer that holds no chat completion (an HTML page from a proxy, JSON cut short, an
empty body, JSON of another shape) ``UnreadableReply``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import re
import urllib.parse
import urllib.request
import weakref
from collections.abc import AsyncIterator, Mapping
from types import SimpleNamespace
from typing import Any

from tandem.reasoner.models.litellm_replies import message_text

__all__ = [
    "DIRECT_PROVIDERS",
    "ChatStream",
    "HostConnectionError",
    "HostReplyError",
    "UnreadableReply",
    "allow",
    "close",
    "direct_model",
    "open_stream",
    "post_chat",
    "proxy_for",
    "read_completion",
    "session",
]

DIRECT_PROVIDERS = ("openai/", "hosted_vllm/")
"""LiteLLM model prefixes whose requests reach an ``api_base`` as plain OpenAI chat completions."""

_REWRITTEN_BY_LITELLM = re.compile(r"(?:^|/)o\d|gpt-[5-9]")
"""``openai/`` model names whose requests LiteLLM rewrites for OpenAI's reasoning models (o1, o3,
o4-mini, gpt-5...): ``max_completion_tokens`` for ``max_tokens``, no ``temperature`` (the API refuses
both), the system prompt as a user message for some."""

_allowed: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, bool] = weakref.WeakKeyDictionary()
_sessions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()


class HostReplyError(Exception):
    """The host answered with an HTTP error: ``status_code``, ``headers`` (lower-cased names) and
    ``body`` (the provider's error object when the answer held one)."""

    def __init__(self, status_code: int, text: str, headers: Mapping[str, str]) -> None:
        self.status_code = status_code
        self.headers = {k.lower(): v for k, v in headers.items()}
        self.body = _error_object(text)
        message = self.body.get("message") if self.body else None
        super().__init__(str(message) if message else text.strip()[:1000] or f"HTTP {status_code}")


class HostConnectionError(ConnectionError):
    """The connection to the host was refused, dropped or broken before a full answer came."""


EXCERPT_READ = 2000
"""Characters of an unreadable answer kept for its error message (which shows fewer)."""

UNREADABLE = {
    "empty": "an empty body",
    "not-json": "{type} that is not JSON",
    "broken-json": "JSON that breaks off or is broken",
    "not-completion": "JSON that is not a chat completion (no choices[0].message with text)",
    "not-stream": "{type} instead of an event stream",
    "no-chunks": "an event stream without any chat completion chunk",
    "cut-stream": "an event stream that ended before the reply was complete",
    "unreadable": "an answer LiteLLM could not read",
}
"""The kinds of ``UnreadableReply``, and how messages say what the host sent."""


class UnreadableReply(Exception):
    """The host answered with success, but with no chat completion: ``kind`` (a key of
    ``UNREADABLE``), the start of the ``body``, its ``content_type`` and HTTP ``status``. A proxy's
    error page, an answer cut short, an empty body: transient (``tandem.reasoner.models.litellm_errors``)."""

    def __init__(self, kind: str, body: str = "", content_type: str = "", status: int = 200) -> None:
        self.kind = kind if kind in UNREADABLE else "unreadable"
        self.body = body[:EXCERPT_READ]
        self.content_type = content_type.split(";", 1)[0].strip()
        self.status = status
        super().__init__(f"the host answered HTTP {status} with {self.what}")

    @property
    def what(self) -> str:
        """What the host sent, in words: ``"text/html that is not JSON"``."""
        return UNREADABLE[self.kind].format(type=self.content_type or "a body")


def read_completion(text: str, content_type: str = "", status: int = 200) -> dict[str, Any]:
    """The chat completion in a success answer's body ``text``: a JSON object whose
    ``choices[0].message`` has text content (or none) and reasoning; ``UnreadableReply`` otherwise."""
    if not text.strip():
        raise UnreadableReply("empty", text, content_type, status)
    try:
        data = json.loads(text)
    except ValueError:
        raise UnreadableReply(json_failure(text), text, content_type, status) from None
    choices = data.get("choices") if isinstance(data, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    if message_text(message) is None:
        raise UnreadableReply("not-completion", text, content_type, status)
    assert isinstance(data, dict)
    return data


def json_failure(text: str) -> str:
    """The ``UnreadableReply`` kind of a body that does not parse as JSON."""
    if not text.strip():
        return "empty"
    return "broken-json" if text.lstrip()[:1] in ("{", "[") else "not-json"


def _error_object(text: str) -> dict[str, Any] | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    error = data.get("error", data) if isinstance(data, dict) else None
    if isinstance(error, str):
        return {"message": error}
    return error if isinstance(error, dict) else None


def direct_model(model: str, api_base: str | None, api_key: str | None) -> str | None:
    """The name to send for ``model`` when its calls may go straight to ``api_base``; ``None`` when
    they go through LiteLLM (another provider, no ``api_base``, a key left to LiteLLM to look up in
    the provider's environment variable, or an OpenAI reasoning model whose request LiteLLM
    rewrites)."""
    if not api_base:
        return None
    for prefix in DIRECT_PROVIDERS:
        if model.startswith(prefix) and len(model) > len(prefix):
            name = model[len(prefix) :]
            if prefix == "openai/" and (not api_key or _REWRITTEN_BY_LITELLM.search(name)):
                return None
            if prefix == "hosted_vllm/" and not api_key and os.environ.get("HOSTED_VLLM_API_KEY"):
                return None
            return name
    return None


def allow(loop: asyncio.AbstractEventLoop) -> None:
    """Let calls running on ``loop`` go straight to their hosts (a session is made on first use)."""
    _allowed[loop] = True


def session() -> Any | None:
    """The running loop's ``aiohttp.ClientSession``; ``None`` when the loop is not allowed one."""
    loop = asyncio.get_running_loop()
    if not _allowed.get(loop):
        return None
    found = _sessions.get(loop)
    if found is None or found.closed:
        import aiohttp

        # No cap on connections: the worker's concurrency (and the fleet's in-flight limit)
        # bounds the calls; a cap here would queue calls that the host is ready to take.
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
        # Not ``trust_env``: aiohttp would then look up the proxy variables and ~/.netrc (in a
        # thread) on every request; ``proxy_for`` reads the proxy variables once per address.
        found = aiohttp.ClientSession(connector=connector)
        _sessions[loop] = found
    return found


@functools.lru_cache(maxsize=64)
def proxy_for(url: str) -> str | None:
    """The proxy the environment names for ``url`` (``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``,
    less ``NO_PROXY``), as httpx and LiteLLM would use it; ``None`` for none."""
    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(parts.netloc):
        return None
    return proxy


async def close() -> None:
    """Close the running loop's session (the loop stops allowing direct calls)."""
    loop = asyncio.get_running_loop()
    _allowed.pop(loop, None)
    found = _sessions.pop(loop, None)
    if found is not None:
        await found.close()


async def post_chat(
    client: Any,
    api_base: str,
    api_key: str | None,
    body: Mapping[str, Any],
    timeout: float,
) -> dict[str, Any]:
    """POST ``body`` to ``{api_base}/chat/completions`` and return the answer's chat completion
    (a JSON object, its shape checked by ``read_completion``)."""
    import aiohttp

    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    url = api_base.rstrip("/") + "/chat/completions"
    try:
        async with client.post(
            url,
            data=json.dumps(body),
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout),
            proxy=proxy_for(url),
        ) as response:
            text = await response.text(errors="replace")
            if response.status >= 400:
                raise HostReplyError(response.status, text, response.headers)
            content_type = response.headers.get("Content-Type", "")
    except TimeoutError:  # aiohttp's time-outs are ``TimeoutError``s too: kept as time-outs
        raise
    except aiohttp.ClientError as exc:
        raise HostConnectionError(f"{type(exc).__name__}: {exc}") from exc
    return read_completion(text, content_type, response.status)


class ChatStream:
    """The chunks of one streamed chat completion, read from the host's event stream as they come.

    Iterating gives each ``data:`` chunk as an object whose fields are attributes (``chunk.choices[0]
    .delta.content``), as LiteLLM's are; the stream ends at ``data: [DONE]`` or when the host closes
    it. ``chunks`` (every chunk read) and ``_response_headers`` are what ``StreamReader.finish`` reads
    to tell an answer with no chunk at all. A line that is not JSON is ``UnreadableReply``; a
    connection lost mid-stream is ``HostConnectionError``.
    """

    def __init__(self, response: Any) -> None:
        self._response = response
        self._response_headers = dict(response.headers)
        self.content_type = str(response.headers.get("Content-Type", ""))
        self.chunks: list[Any] = []

    async def __aiter__(self) -> AsyncIterator[Any]:
        import aiohttp

        try:
            async for raw in self._response.content:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue  # blank separators, ``:`` comments, ``event:`` and ``id:`` lines
                payload = line[5:].strip()
                if payload == "[DONE]":
                    return
                chunk = _chunk(payload, self.content_type, self._response.status)
                self.chunks.append(chunk)
                yield chunk
        except aiohttp.ClientError as exc:
            raise HostConnectionError(f"{type(exc).__name__}: {exc}") from exc


def _chunk(payload: str, content_type: str, status: int) -> Any:
    """One ``data:`` payload as an object; ``HostReplyError`` for an error object the host sent
    mid-stream, ``UnreadableReply`` for anything that is not a JSON object."""
    try:
        data = json.loads(payload)
    except ValueError:
        raise UnreadableReply(json_failure(payload), payload, content_type, status) from None
    if not isinstance(data, dict):
        raise UnreadableReply("not-completion", payload, content_type, status)
    if "error" in data and "choices" not in data:
        raise HostReplyError(500, payload, {})
    return json.loads(payload, object_hook=lambda fields: SimpleNamespace(**fields))


@contextlib.asynccontextmanager
async def open_stream(
    client: Any,
    api_base: str,
    api_key: str | None,
    body: Mapping[str, Any],
    timeout: float,
) -> AsyncIterator[ChatStream]:
    """POST ``body`` (a streamed request) to ``{api_base}/chat/completions`` and give its chunks
    (``ChatStream``) while the answer is open; errors as ``post_chat``'s, and ``UnreadableReply``
    (``not-stream``) for a success answer that is no event stream (a proxy's page, a JSON body)."""
    import aiohttp

    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    url = api_base.rstrip("/") + "/chat/completions"
    try:
        async with client.post(
            url,
            data=json.dumps(body),
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout),
            proxy=proxy_for(url),
        ) as response:
            content_type = response.headers.get("Content-Type", "")
            if response.status >= 400:
                raise HostReplyError(response.status, await response.text(errors="replace"), response.headers)
            if content_type and "event-stream" not in content_type:
                text = await response.text(errors="replace")
                raise UnreadableReply("not-stream", text, content_type, response.status)
            yield ChatStream(response)
    except TimeoutError:
        raise
    except aiohttp.ClientError as exc:
        raise HostConnectionError(f"{type(exc).__name__}: {exc}") from exc
