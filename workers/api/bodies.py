"""Request bodies of ``tandem api``: strict JSON in, and refusals that never echo a secret.

Every malformed body is a 4xx with one line saying what was wrong, never a 500:

* not ``application/json``: 415; larger than ``TANDEM_API_MAX_BODY``: 413;
* empty, not UTF-8, not JSON, ``NaN``/``Infinity`` (or a number too large for a double),
  a lone surrogate (``"\\ud800"``: no UTF-8 text can hold it), nesting deeper than
  ``max_depth`` (a body nested 100,000 deep included): 400;
* valid JSON of the wrong shape (not an object, a bad field): 422, from the endpoint.

A 422 about a job spec names each bad field and echoes its value, except in the spec's secret
fields (those declared with ``repr=False``, i.e. ``JobSpec.secrets``): their values are shown as
``***``, and every value found in them is masked wherever else it appears in the answer.
"""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import ValidationError
from starlette.requests import Request

from tandem.tasks.spec import JobSpec
from tandem.toolkit.redaction import MASK, MIN_SECRET_CHARS
from tandem.workers.api.errors import ApiError
from tandem.workers.api.guards import too_large

MAX_DEPTH = 64
"""How deep a request body may nest (objects and lists); a job spec's own limit is lower
(``TANDEM_MAX_METADATA_DEPTH``) and named by its own error."""
SECRET_FIELDS: frozenset[str] = frozenset(
    name for name, info in JobSpec.model_fields.items() if info.repr is False
)
"""The job spec's fields whose values are secret: never echoed in an error."""


def _invalid(message: str) -> ApiError:
    return ApiError(400, "invalid_json", message)


def _constant(name: str) -> Any:
    raise _invalid(f"the body holds {name}, which JSON has no place for: send a finite number, or null")


def _number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _invalid(f"the number {text[:40]} is too large for a 64-bit float: send a smaller number")
    return value


def _integer(text: str) -> int:
    if len(text.lstrip("-")) > 4000:  # int() refuses past 4,300 digits with advice for Python users
        raise _invalid(f"a number in the body has {len(text)} digits: send it as a string")
    return int(text)


def _check(value: Any, max_depth: int) -> None:
    """Refuse nesting deeper than ``max_depth`` and strings no UTF-8 text can hold (iteratively)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                bad = item[exc.start]
                raise _invalid(
                    f"the body holds a lone surrogate (\\u{ord(bad):04x}), which is not text: escape "
                    "characters outside the BMP as a surrogate pair, or send UTF-8"
                ) from None
        elif isinstance(item, dict | list):
            if depth >= max_depth:
                raise _invalid(f"the body nests deeper than {max_depth} levels: send flatter JSON")
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)


def parse_json(body: bytes, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value of ``body`` (non-empty), or an ``ApiError`` 400 saying in one line what is wrong."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _invalid(
            f"the body is not UTF-8 text (byte {exc.start} is 0x{body[exc.start]:02x}): send JSON as UTF-8"
        ) from None
    try:
        value = json.loads(text, parse_constant=_constant, parse_float=_number, parse_int=_integer)
    except RecursionError:
        raise _invalid(f"the body nests deeper than {max_depth} levels: send flatter JSON") from None
    except ValueError as exc:
        raise _invalid(f"the body is not valid JSON: {' '.join(str(exc).split())[:200]}") from None
    _check(value, max_depth)
    return value


async def read_json(
    request: Request, limit: int, *, max_depth: int = MAX_DEPTH, optional: bool = False
) -> Any:
    """The request's JSON body, read up to ``limit`` bytes (413 beyond it, 415 if not JSON, 400 if
    malformed); ``None`` for an empty body when ``optional``."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise ApiError(
            415,
            "unsupported_media_type",
            f"Content-Type {kind or '(none)'!r} is not accepted: send the body as application/json",
        )
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
    body = b"".join(chunks)
    if not body.strip():
        if optional:
            return None
        raise ApiError(400, "empty_body", "the body is empty: send a JSON object")
    return parse_json(body, max_depth)


async def optional_json(request: Request, limit: int) -> dict[str, Any]:
    """The request's JSON object body, or ``{}`` when it sent none."""
    if not request.headers.get("content-type") and request.headers.get("content-length", "0") == "0":
        return {}
    raw = await read_json(request, limit, optional=True)
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ApiError(422, "invalid_body", f"the body must be a JSON object, got {_kind(raw)}")
    return raw


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null"}.get(
        type(value), "a number"
    )


def json_object(raw: Any, code: str, what: str) -> dict[str, Any]:
    """``raw`` when it is a JSON object, else a 422 ``code`` saying the body must be ``what``."""
    if isinstance(raw, dict):
        return raw
    raise ApiError(
        422,
        code,
        f"the body must be a JSON object ({what}), got {_kind(raw)}",
        fields=[{"field": "(body)", "message": "not a JSON object"}],
    )


# -- job specs: refusals without secrets ---------------------------------------------------------------


def pause_fields(body: dict[str, Any], request: Request) -> tuple[str | None, str | None]:
    """The ``pause_id`` and idempotency key (the body's ``idempotency_key``, else the
    ``Idempotency-Key`` header) of a decision or an answer; 422 naming the field when one is not
    a string of 1 to 200 characters."""
    pause_id = body.get("pause_id")
    key = body.get("idempotency_key", request.headers.get("idempotency-key"))
    for field, value in (("pause_id", pause_id), ("idempotency_key", key)):
        if value is not None and (not isinstance(value, str) or not 0 < len(value) <= 200):
            raise ApiError(
                422,
                f"invalid_{field}",
                f"{field} must be a string of 1 to 200 characters (a pause's id from GET "
                "/v1/jobs/{id}, or a key of your choice for idempotency_key)",
                fields=[{"field": field, "message": "a string of 1 to 200 characters"}],
            )
    return pause_id, key


def secret_values(raw: dict[str, Any]) -> list[str]:
    """Every string inside the secret fields of a raw spec (longest first), to mask in answers."""
    found: list[str] = []
    stack = [raw.get(name) for name in SECRET_FIELDS]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return sorted({s for s in found if len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True)


def _masked_input(loc: tuple[Any, ...], value: Any) -> Any:
    if loc and loc[0] in SECRET_FIELDS:
        return MASK
    if not loc and isinstance(value, dict):  # an error about the whole spec shows the whole spec
        return {k: (MASK if k in SECRET_FIELDS else v) for k, v in value.items()}
    return value


def _short(value: Any) -> Any:
    text = json.dumps(value, default=str)
    return value if len(text) <= 200 else text[:200] + "…"


def _scrub(value: Any, secrets: list[str]) -> Any:
    """``value`` (an error body) with every secret string replaced by ``***``, wherever it stands."""
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, MASK)
        return value
    if isinstance(value, dict):
        return {_scrub(k, secrets): _scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, secrets) for v in value]
    return value


def without_secrets(error: ApiError, raw: dict[str, Any]) -> ApiError:
    """``error`` with every value of ``raw``'s secret fields masked in its message and fields."""
    secrets = secret_values(raw)
    if not secrets:
        return error
    extra = _scrub(error.extra, secrets)
    return ApiError(error.status, error.code, _scrub(error.message, secrets), **extra)


def validate_spec(raw: dict[str, Any]) -> JobSpec:
    """A ``JobSpec`` from a request's object, or a 422 naming each bad field (secrets masked)."""
    try:
        return JobSpec.model_validate(raw)
    except ValidationError as exc:
        fields = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            where = ".".join(str(p) for p in loc) or "(spec)"
            reason = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
            shown = _short(_masked_input(loc, err.get("input")))
            fields.append({"field": where, "message": reason, "input": shown})
        summary = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
        error = ApiError(422, "invalid_spec", f"invalid job spec: {summary}", fields=fields)
        raise without_secrets(error, raw) from None
