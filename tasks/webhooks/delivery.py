"""``tandem.webhook``: one attempt of one webhook delivery; and what starts deliveries.

A job whose spec names ``webhooks`` is *armed* when it starts (intake, resume, fork): it enters the
webhook index. What it is owed follows from its record alone (``owed``): an ended job one ``final``
delivery per webhook asking for it (per run: a resumed job's next end is another), a job parked for
a person (any ``awaiting_*`` state: approvals, questions) one ``waiting_for_person`` delivery per
pause. The step that parks or ends the job plans them at once and sends their messages (``notify``);
the sweeper (``tandem.tasks.webhooks.sweeper``) does the same for a job whose worker died first,
and sends again a delivery whose message or worker was lost.

One attempt (``deliver``): claim the delivery (``WebhookOutbox.claim``), check its host against this
worker's allow-list, POST the body with ``Tandem-Delivery`` (the delivery's id, the same on every
attempt), ``Tandem-Event`` and ``Tandem-Signature`` (``tandem.tasks.webhooks.signing``), with
``TANDEM_WEBHOOK_TIMEOUT`` and no redirects followed. A 2xx answer delivers it; anything else (an
error status, a refused connection, a time-out) is retried after ``retry_delay`` seconds until
``TANDEM_WEBHOOK_MAX_ATTEMPTS``. Each outcome is a ``webhook_delivered`` / ``webhook_failed`` event
of the job.
"""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from collections.abc import Collection
from typing import Any

import httpx

from tandem.broker_config.webhook_settings import WebhookSettings
from tandem.tasks.app import app
from tandem.tasks.job_events import WebhookDelivered, WebhookFailed, decode_entry
from tandem.tasks.runtime import Runtime, get_runtime
from tandem.tasks.spec import FINAL_STATES, JobSpec
from tandem.tasks.webhooks.outbox import Claimed, Delivery, delivery_id
from tandem.tasks.webhooks.signing import DELIVERY_HEADER, EVENT_HEADER, SIGNATURE_HEADER, sign
from tandem.tasks.webhooks.targets import refusal, shown_url
from tandem.toolkit.redaction import redact, redact_data

log = logging.getLogger("tandem.webhooks")

TASK = "tandem.webhook"
PAUSE_LOOKBACK = 200
"""How many of a parked job's newest events are searched for the event that announced its pause."""


def retry_delay(settings: WebhookSettings, attempt: int, rng: random.Random | None = None) -> float:
    """Seconds before the attempt after failed attempt ``attempt`` (from 1): ``backoff * 2**(attempt
    - 1)``, at most ``backoff_max``, less up to a quarter at random (deliveries that failed together
    do not come back together)."""
    full = min(settings.backoff_max, settings.backoff * 2 ** (attempt - 1))
    return full * (1 - 0.25 * (rng or random).random())


def schedule_seconds(settings: WebhookSettings) -> float:
    """The longest a delivery may take from its first attempt to its last (every wait in full)."""
    waits = sum(
        min(settings.backoff_max, settings.backoff * 2 ** (n - 1)) for n in range(1, settings.max_attempts)
    )
    return waits + settings.max_attempts * settings.timeout


def _ttl(rt: Runtime) -> int:
    return int(rt.settings.memory_ttl + schedule_seconds(rt.settings.webhooks))


def arm(rt: Runtime, job_id: str, spec: JobSpec) -> None:
    """Put a job that names webhooks in the webhook index, before it can park or end: whatever it is
    then owed, the sweeper finds it even if the worker that parked or ended it died first."""
    if not spec.webhooks:
        return
    timeout = spec.timeout_s or rt.settings.job_timeout
    rt.webhooks.watch(job_id, time.time() + _look(rt), int(timeout) + _ttl(rt))


def _look(rt: Runtime) -> float:
    """How often the sweeper looks at an armed job that is owed nothing yet."""
    return max(rt.settings.stall_seconds, 1.0)


def occasion(record: dict[str, str]) -> tuple[str, str] | None:
    """What a job in ``record``'s state is owed: ``("final", "final:<run>")`` once it ended,
    ``("waiting_for_person", "pause:<seq>")`` while parked for a person; ``None`` otherwise."""
    state = record.get("state", "")
    if state in FINAL_STATES:
        return "final", f"final:{record.get('resumes') or 0}"
    if state.startswith("awaiting_"):
        return "waiting_for_person", f"pause:{record.get('pause_seq') or 0}"
    return None


def owed(
    rt: Runtime, job_id: str, record: dict[str, str], spec: JobSpec, known: Collection[str] = ()
) -> list[Delivery]:
    """The deliveries the job is owed in the state ``record`` holds (none for a running job); none
    when every one of them is among the ``known`` delivery ids (planned already)."""
    found = occasion(record)
    if found is None:
        return []
    event, key = found
    hooks = [(i, h) for i, h in enumerate(spec.webhooks) if event in h.events]
    if all(delivery_id(job_id, key, i) in known for i, _ in hooks):
        return []
    body: dict[str, Any] = {
        "event": event,
        "job_id": job_id,
        "owner": spec.owner,
        "at": round(time.time(), 3),
    }
    if event == "final":
        result = rt.store.result(job_id)
        body["result"] = None if result is None else result.model_dump(mode="json")
    else:
        body.update(_pause(rt, job_id, record))
    body["links"] = {"job": f"/v1/jobs/{job_id}", "events": f"/v1/jobs/{job_id}/events"}
    out = []
    for index, hook in hooks:
        did = delivery_id(job_id, key, index)
        text = json.dumps(redact_data({"id": did, **body}), ensure_ascii=False, default=str)
        out.append(Delivery(id=did, job_id=job_id, url=hook.url, event=event, body=text))
    return out


def _pause(rt: Runtime, job_id: str, record: dict[str, str]) -> dict[str, Any]:
    """What a ``waiting_for_person`` body says of the pause: its number, round and state, and the
    event that announced it (``approval_requested``, ``question_asked``: the newest one carrying the
    pause's ``seq``), as the job's stream holds it (redacted)."""
    seq = int(record.get("pause_seq") or 0)
    info: dict[str, Any] = {
        "state": record.get("state", ""),
        "round": int(record.get("round") or 0),
        "seq": seq,
    }
    entries = rt.redis.xrevrange(rt.store.key(job_id, "events"), count=PAUSE_LOOKBACK)
    for entry_id, fields in entries:
        event = decode_entry(entry_id, fields)
        data = event.data
        if data.get("pause_id") and data.get("seq") == seq:
            info.update(pause_id=data["pause_id"], reason=event.type, pause=data)
            break
    return info


def plan(rt: Runtime, job_id: str, deliveries: list[Delivery]) -> None:
    """Write ``deliveries`` (each once) and have the sweeper check on them a lease from now."""
    rt.webhooks.plan(deliveries, _ttl(rt), time.time() + rt.settings.lease_seconds)


def send(job_id: str, delivery: str, countdown: float | None = None) -> None:
    """Send the message that wakes one delivery up (on the intake queue)."""
    app.send_task(
        TASK,
        args=[job_id, delivery],
        countdown=countdown,
        task_id=f"{job_id}.webhook.{uuid.uuid4().hex[:8]}",
        ignore_result=True,
    )


def notify(rt: Runtime, job_id: str, spec: JobSpec | None = None) -> None:
    """Plan what the job is owed now (it just parked or ended) and send it; never raises (the
    sweeper plans and sends what this could not)."""
    try:
        spec = spec if spec is not None else rt.store.spec(job_id)
        if spec is None or not spec.webhooks:
            return
        deliveries = owed(rt, job_id, rt.machine.record(job_id), spec)
        plan(rt, job_id, deliveries)
        for d in deliveries:
            send(job_id, d.id)
    except Exception:
        log.warning(
            "job %s: starting its webhook deliveries failed; the sweeper does it", job_id, exc_info=True
        )


# -- one attempt -------------------------------------------------------------------------------


def post(delivery: Delivery, settings: WebhookSettings, attempt: int) -> tuple[int | None, str]:
    """POST ``delivery`` once, signed; the answer's status (``None``: none came) and, for anything
    but a 2xx, what went wrong."""
    from tandem import __version__

    body = delivery.body.encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": f"tandem-webhooks/{__version__}",
        DELIVERY_HEADER: delivery.id,
        EVENT_HEADER: delivery.event,
        "Tandem-Attempt": str(attempt),
        SIGNATURE_HEADER: sign(settings.secret or "", body),
    }
    try:
        with httpx.Client(timeout=settings.timeout, follow_redirects=False) as client:
            answer = client.post(delivery.url, content=body, headers=headers)
    except httpx.HTTPError as exc:
        return None, redact(f"{type(exc).__name__}: {exc}")[:300]
    if 200 <= answer.status_code < 300:
        return answer.status_code, ""
    return answer.status_code, f"HTTP {answer.status_code} {answer.reason_phrase}".strip()


def deliver(rt: Runtime, job_id: str, delivery: str) -> str:
    """One attempt of ``delivery`` (see the module docstring); what came of it: ``delivered``,
    ``retry``, ``failed``, or the claim's refusal (``busy``, ``early``, ``delivered``, ...)."""
    conf = rt.settings.webhooks
    got = rt.webhooks.claim(job_id, delivery, lease=conf.timeout + rt.settings.lease_seconds)
    if not isinstance(got, Claimed):
        return got[0]
    d, attempt = got.delivery, got.attempt
    problem = refusal(d.url, conf)
    if problem is None and not conf.secret:
        problem = "this worker has no TANDEM_WEBHOOK_SECRET to sign the delivery with"
    status, error = (None, problem) if problem else post(d, conf, attempt)
    fields: dict[str, Any] = {
        "delivery_id": d.id,
        "event": d.event,
        "url": shown_url(d.url),
        "attempt": attempt,
    }
    if not error and status is not None:
        if rt.webhooks.report(job_id, d.id, attempt, "delivered"):
            rt.store.publish(job_id, WebhookDelivered(**fields, status_code=status))
        return "delivered"
    if problem or attempt >= conf.max_attempts:
        if rt.webhooks.report(job_id, d.id, attempt, "failed"):
            rt.store.publish(job_id, WebhookFailed(**fields, status_code=status, error=error))
            log.warning(
                "job %s: webhook %s given up after attempt %d: %s", job_id, fields["url"], attempt, error
            )
        return "failed"
    delay = retry_delay(conf, attempt)
    due = rt.webhooks.report(job_id, d.id, attempt, "retry", delay)
    if due:
        rt.store.publish(
            job_id, WebhookFailed(**fields, status_code=status, error=error, retry_at=float(due))
        )
        rt.webhooks.watch(job_id, float(due) + rt.settings.lease_seconds, _ttl(rt))
        send(job_id, d.id, countdown=round(delay, 3))
    return "retry"


@app.task(name=TASK, acks_late=True, ignore_result=True)
def webhook(job_id: str, delivery: str) -> None:
    """Try delivery ``delivery`` of job ``job_id`` once (see the module docstring)."""
    if not isinstance(job_id, str) or not isinstance(delivery, str):
        log.warning("message refused, nothing done: %s needs a job id and a delivery id", TASK)
        return
    deliver(get_runtime(), job_id, delivery)
