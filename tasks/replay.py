"""Replay protection for signed messages: a signature binds a message to its task id, an expiry
and a nonce, and a worker runs each signed message once.

Celery's ``auth`` serializer signs a message's body (arguments and options), not its headers, and
the task id lives in the headers: a captured ``tandem.infer`` re-sent under a new task id passed
the signature and ran as a second job, with the first one's sealed secrets. So, with signing on:

- **The sender seals** (``seal_message``, on Celery's ``before_task_publish``) every tandem task
  message it publishes: the body's ``embed`` (the options the signature covers) gets
  ``tandem_seal = {"id": <task id>, "nonce": <random>, "exp": <Unix time>}``, ``exp`` being the
  message's ``eta`` (or now) plus ``TANDEM_SIGNING_MAX_AGE``.
- **The worker checks** (``check_seal``, before the task runs): the seal is there, names the
  message's own task id, and has not expired; then it writes ``<prefix>:{<job_id>}:seen:<nonce>``
  with ``SET NX`` and a TTL of what is left of the window. A nonce seen before is a replay. A
  message the broker hands out again by itself (kombu's ``redelivered`` flag, after a worker died
  holding it) passes that last check: it is the same task with the same id, which every tandem
  task is safe to run twice (``tandem.infer`` is idempotent on its id, a step on its claim).

A refused message is a logged no-op: one WARNING line naming the task and why; an internal step or
``tandem.infer`` is ignored (no result is stored: a replay can never overwrite a job's result), a
control task answers ``accepted: false``. Without signing nothing here runs: an unsigned seal
would prove nothing.
"""

from __future__ import annotations

import re
import time
import uuid
from datetime import datetime
from typing import Any

_NONCE = re.compile(r"[0-9a-f]{8,64}")

SEAL = "tandem_seal"
"""The name of the seal in a message body's ``embed`` (Celery's request gets it as an attribute)."""


class Replayed(Exception):
    """A signed message the worker refuses: no seal, another task's, expired, or seen before."""


def _eta(headers: dict[str, Any]) -> float:
    eta = headers.get("eta")
    if not eta:
        return 0.0
    try:
        return datetime.fromisoformat(str(eta)).timestamp()
    except ValueError:
        return 0.0


def seal_message(body: Any, headers: dict[str, Any], max_age: float, *, now: float | None = None) -> None:
    """Add the seal to ``body`` (Celery's ``(args, kwargs, embed)``), in place, before it is
    serialized and signed. A body of another shape (Celery's protocol 1) is left as it is."""
    if not isinstance(body, tuple | list) or len(body) != 3 or not isinstance(body[2], dict):
        return
    task_id = headers.get("id")
    if not isinstance(task_id, str):
        return
    start = max(time.time() if now is None else now, _eta(headers))
    body[2][SEAL] = {"id": task_id, "nonce": uuid.uuid4().hex, "exp": round(start + max_age, 3)}


def seen_key(prefix: str, job_id: str, nonce: str) -> str:
    """The key that remembers a seal's nonce, in the job's hash tag (one slot per job)."""
    return f"{prefix}:{{{job_id}}}:seen:{nonce}"


def check_seal(
    seal: Any,
    task_id: str | None,
    job_id: str,
    *,
    redis: Any,
    prefix: str,
    redelivered: bool = False,
    now: float | None = None,
) -> None:
    """Raise ``Replayed`` unless ``seal`` is a seal of ``task_id`` not expired at ``now`` whose
    nonce this worker fleet has not seen (it is remembered from here on, until the seal expires)."""
    if not isinstance(seal, dict):
        raise Replayed("it carries no seal (a client without tandem's signing hook: see docs/security.md)")
    nonce, exp = seal.get("nonce"), seal.get("exp")
    if seal.get("id") != task_id or not task_id:
        raise Replayed(f"it was signed for task id {seal.get('id')!r}, not {task_id!r}")
    if not isinstance(nonce, str) or not _NONCE.fullmatch(nonce) or not isinstance(exp, int | float):
        raise Replayed("its seal is malformed")
    now = time.time() if now is None else now
    if exp <= now:
        raise Replayed(f"its seal expired {now - exp:.0f} s ago (TANDEM_SIGNING_MAX_AGE)")
    ttl = max(1, int(exp - now) + 1)
    if not redis.set(seen_key(prefix, job_id, nonce), "1", nx=True, ex=ttl) and not redelivered:
        raise Replayed("it was run before (a replay of a signed message)")


_max_age: list[float] = []


def _on_publish(sender: str | None = None, body: Any = None, headers: Any = None, **_: Any) -> None:
    if _max_age and isinstance(sender, str) and sender.startswith("tandem.") and isinstance(headers, dict):
        seal_message(body, headers, _max_age[-1])


def install(max_age: float) -> None:
    """Seal every tandem task message this process publishes, valid ``max_age`` seconds (the
    latest call's: one process signs with one setting)."""
    from celery.signals import before_task_publish

    _max_age.append(max_age)
    del _max_age[:-1]
    before_task_publish.connect(_on_publish, weak=False, dispatch_uid="tandem-seal")


__all__ = ["SEAL", "Replayed", "check_seal", "install", "seal_message", "seen_key"]
