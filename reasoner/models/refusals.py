"""Refusals: a host's error answers that will not change on retry, read from its own words.

A status tells most of it: 4xx answers (but 408, 409 and 429) fail a call at once, 5xx answers are
retried. Some hosts answer a request they will never serve with a 5xx, though, and some say "the
conversation is too long" with a status that does not say it. ``refusal`` reads the host's message
for these kinds, so the call fails at once with the host's words and what to do instead of being
retried until the job's deadline:

* ``"context"``: the request does not fit the model's context window (any status: OpenAI's and
  vLLM's "maximum context length", llama-cpp-python's ``context_length_exceeded``, llama.cpp's
  "exceeds the available context size", LiteLLM's ``ContextWindowExceededError``);
* ``"validation"``: a 5xx whose body is a request validation error (pydantic's "N validation
  errors", "Input should be ...", "Field required": llama-cpp-python answers its request schema's
  refusals with HTTP 500);
* ``"template"``: a 5xx from the host's chat template failing on the request (jinja's
  ``'dict object' has no attribute 'content'``, ``TemplateError``);
* ``"unsupported"``: a 5xx saying the request asks what the host does not do ("... is not
  supported", ``NotImplementedError``).

``summary`` turns a pydantic error list into one line per error that matters.
"""

from __future__ import annotations

import ast
import re

__all__ = ["REFUSALS", "refusal", "summary"]

REFUSALS = ("context", "validation", "template", "unsupported")

_CONTEXT = re.compile(
    r"context[ _](?:length|window|size)|maximum context|max_model_len|"
    r"exceeds? the (?:available )?context|prompt is too long",
    re.IGNORECASE,
)
_VALIDATION = re.compile(
    r"\bvalidation errors?\b|\bInput should be\b|\bField required\b|\bExtra inputs are not permitted\b",
)
_TEMPLATE = re.compile(
    r"'[\w ]+ object' has no attribute|\bTemplateError\b|\bUndefinedError\b|\bjinja",
    re.IGNORECASE,
)
_UNSUPPORTED = re.compile(r"\bnot (?:yet )?supported\b|\bunsupported\b|\bNotImplemented", re.IGNORECASE)
_ERROR_LINE = re.compile(r"^\s*(\{'type':.*\})\s*$", re.MULTILINE)


def refusal(message: str, status: int | None, class_name: str = "") -> str | None:
    """The kind of refusal (one of ``REFUSALS``) the host's ``message`` with HTTP ``status``
    (``None``: unknown) is, or ``None`` for an error that a retry may change. ``class_name``:
    the exception's, for LiteLLM's ``ContextWindowExceededError``."""
    if status in (408, 409, 429):  # a rate limit's words may name tokens, never a refusal
        return None
    if class_name == "ContextWindowExceededError" or _CONTEXT.search(message):
        return "context"
    if status is None or status < 500:
        return None
    if _VALIDATION.search(message):
        return "validation"
    if _TEMPLATE.search(message):
        return "template"
    if _UNSUPPORTED.search(message):
        return "unsupported"
    return None


def summary(message: str) -> str:
    """``message`` with a pydantic error list (``{'type': ..., 'loc': ..., 'msg': ...}`` lines)
    said as ``messages.2.content: Input should be a valid string (got None)``, one per error,
    leaving out a union's other branches (``literal_error`` on a discriminating field) when
    anything else is left; any other message unchanged."""
    errors = []
    for line in _ERROR_LINE.findall(message):
        try:
            error = ast.literal_eval(line)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
        if isinstance(error, dict):
            errors.append(error)
    if not errors:
        return message
    kept = [e for e in errors if e.get("type") != "literal_error"] or errors
    said = []
    for error in kept:
        where = ".".join(
            str(part)
            for part in error.get("loc") or ()
            if isinstance(part, int) or (isinstance(part, str) and part != "body" and not part[:1].isupper())
        )
        shown = "input" in error and not isinstance(error["input"], dict | list)
        got = f" (got {error['input']!r})" if shown else ""
        said.append(f"{where or 'request'}: {error.get('msg') or error.get('type')}{got}")
    head = message.split("\n", 1)[0].strip().rstrip(":")
    return f"{head}: " + "; ".join(dict.fromkeys(said))
