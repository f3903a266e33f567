"""``TandemTask``: the base class of tandem's Celery tasks, whose requests never show secrets.

Flower and the worker log show a task's arguments as the message's ``argsrepr``/``kwargsrepr``,
which a client writes as it likes (a bare Celery client writes the whole spec, secrets included).
``RedactingRequest`` rewrites both from the decoded arguments when the worker receives the message,
before its ``task-received`` event is sent: ``JobSpec.secrets`` values become ``***``, credentials are
redacted (``tandem.toolkit.redaction``), and the text is cut to ``REPR_CHARS``.
"""

from __future__ import annotations

import logging
from contextvars import copy_context
from reprlib import Repr
from typing import Any

from celery import Task
from celery.exceptions import Ignore
from celery.signals import task_postrun
from celery.worker.request import Request

from tandem.tasks.call_answers import may_store_answer
from tandem.tasks.errors import TaskCallError
from tandem.tasks.intake_secrets import conceal
from tandem.tasks.replay import SEAL, Replayed, check_seal
from tandem.tasks.signers import SIGNER, ForeignTenant, bind_tenant
from tandem.tasks.task_args import (
    CONTROL_TASKS,
    INTAKE,
    PUBLIC_TASKS,
    InvalidArgument,
    check_arguments,
    check_job_id,
    refusal_of,
)
from tandem.toolkit.redaction import MASK, enter_scope, redact, redact_data

log = logging.getLogger("tandem.tasks")

REPR_CHARS = 1024
_repr = Repr()
_repr.maxlevel, _repr.maxdict, _repr.maxlist, _repr.maxstring, _repr.maxother = 6, 20, 20, 200, 200


def _mask_secrets(value: Any, depth: int = 0) -> Any:
    if depth > 8:
        return "..."
    if isinstance(value, dict):
        return {
            k: (
                dict.fromkeys(v, MASK)
                if k == "secrets" and isinstance(v, dict)
                else _mask_secrets(v, depth + 1)
            )
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_mask_secrets(v, depth + 1) for v in value[:50]]
    return value


def shown(value: Any) -> str:
    """A short, redacted display form of a task's arguments."""
    try:
        text = redact(_repr.repr(redact_data(_mask_secrets(value))))
    except Exception:
        return "(arguments not shown)"
    return text if len(text) <= REPR_CHARS else text[: REPR_CHARS - 3] + "..."


class RedactingRequest(Request):
    """A worker-side request whose ``argsrepr``/``kwargsrepr`` never hold secrets, and whose
    decoded ``tandem.infer`` arguments (what ``celery inspect active|reserved|scheduled`` and
    Flower's worker page show) hold no secret in clear: a bare client's clear value is ``***``
    there (the task runs from the message's body, decoded again, so it still gets the value;
    ``tandem.tasks.intake_secrets``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        try:
            if not self.kwargs and all(_plain(a) for a in self.args):
                # A step's arguments (job id, round, call index): only registered secrets and
                # credential shapes to mask, at a fraction of the cost of the general path.
                self._argsrepr, self._kwargsrepr = redact(repr(list(self.args))), "{}"
                return
            # What ``celery inspect`` and Flower's worker page show (a message decoded once runs
            # from these very arguments: left alone).
            if self.name == INTAKE and not self._decoded:
                for value in (self.kwargs.get("spec"), *self.args):
                    conceal(value, None)
            self._argsrepr = shown(list(self.args))
            self._kwargsrepr = shown(dict(self.kwargs))
        except Exception:
            self._argsrepr = self._kwargsrepr = "(arguments not shown)"


def _plain(value: Any) -> bool:
    return isinstance(value, int) or (isinstance(value, str) and len(value) <= 100)


class TandemTask(Task):
    """Every tandem task: its requests are ``RedactingRequest``, its arguments are checked before
    it runs (``tandem.tasks.task_args``), and a control task's message whose id names a job (or
    has its answer already) is only logged, so its answer never stands for a job's result
    (``tandem.tasks.call_answers``)."""

    Request = RedactingRequest
    throws = (TaskCallError,)
    """A caller's mistake, not the worker's: Celery stores it as the result and logs it without
    a traceback."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the task once its arguments pass
        ``tandem.tasks.task_args`` and, with message signing, its seal passes
        ``tandem.tasks.replay``; a refused message does nothing but answer (``refusal_of``)."""
        name = self.name or ""
        if name.startswith("tandem."):
            direct = self.request.called_directly
            if name in CONTROL_TASKS and not direct and not self._may_store():
                # Its answer would overwrite a job's result (or this message's first answer).
                log.warning(
                    "%s message under the id %r of a job or an answer: only logged", name, self.request.id
                )
                raise Ignore()
            try:
                if name == INTAKE and not direct:
                    check_job_id(name, self.request.id)  # the new job's id, which its steps carry
            except InvalidArgument as invalid:  # no job can have that id: nothing to overwrite
                return refusal_of(name, invalid, kwargs, args, answer=True)
            try:
                named = check_arguments(
                    name, self.run, args, kwargs, keywords_only=name in PUBLIC_TASKS and not direct
                )
            except InvalidArgument as invalid:
                return refusal_of(name, invalid, kwargs, args, answer=direct or self._may_answer())
            try:
                if self._signed() and not direct:
                    self._check_seal(named.get("job_id"))
                    kwargs = self._bind_tenant(name, named, kwargs)
            except ForeignTenant as foreign:
                return self._foreign(name, foreign, named, kwargs, args)
            except Replayed as replayed:
                said = Replayed(f"{name} (task id {self.request.id}): {replayed}")
                return refusal_of(name, said, kwargs, args, reason="replayed")
        if self.request.called_directly:  # a plain call: the caller's context is left as it was
            return copy_context().run(super().__call__, *args, **kwargs)
        # From a message: every task starts with no job's secret scope (the step enters its
        # job's), which stays through Celery's own log of the outcome, tracebacks included, and
        # ends at ``task_postrun`` (``_end_job_scope``).
        enter_scope(None)
        return super().__call__(*args, **kwargs)

    def _foreign(
        self,
        name: str,
        foreign: ForeignTenant,
        named: dict[str, Any],
        kwargs: dict[str, Any],
        args: tuple[Any, ...],
    ) -> Any:
        """A message signed by a tenant's certificate that asks as another tenant: one WARNING
        line, and a control task answers the one refusal of a job the tenant may not see, word
        for word what it answers for a job that does not exist (``tandem.tasks.control.owners``);
        an intake for another tenant and an internal step get no result (docs/security.md)."""
        if name not in CONTROL_TASKS:
            return refusal_of(name, foreign, kwargs, args)
        from tandem.tasks.control.owners import unknown_job  # a client's app loads no state machine

        log.warning("message refused, nothing done: %s", foreign)
        return unknown_job(name, named.get("job_id"), named.get("pause_id"))

    def _may_answer(self) -> bool:
        """Whether a refused ``tandem.infer`` message may store its refusal as its result: its id
        names no job (no record, not even ``submit``'s ``queued`` one, and no result), so the answer
        overwrites nothing (a forged copy under a real job's id is only logged)."""
        if self.name != INTAKE:
            return True
        if self.request.ignore_result:  # nobody waits: Celery would store nothing anyway
            return False
        return may_store_answer(self.request.id, self.backend)

    def _may_store(self) -> bool:
        """Whether a control task's answer may be stored under its task id: ``may_store_answer``
        (``tandem.tasks.call_answers``); always, when Celery stores none (run eagerly, or sent
        with ``ignore_result``)."""
        if self.request.is_eager or self.request.ignore_result:
            return True
        return may_store_answer(self.request.id, self.backend)

    def _signed(self) -> bool:
        return list(self.app.conf.accept_content or ()) == ["auth"]

    def _bind_tenant(self, name: str, named: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        """``kwargs`` bound to the tenant of the certificate that signed the message, if it is a
        tenant's (``tandem.tasks.signers``)."""
        from tandem.tasks.runtime import get_runtime

        signing = get_runtime().settings.signing
        signer = getattr(self.request, SIGNER, None)
        tenant = signing.tenants.get(signer) if signing is not None and isinstance(signer, str) else None
        return kwargs if tenant is None else bind_tenant(name, self.run, named, dict(kwargs), tenant)

    def _check_seal(self, job_id: Any) -> None:
        from tandem.tasks.runtime import get_runtime  # the runtime imports the app: only when run

        rt = get_runtime()
        request = self.request
        delivery = request.delivery_info or {}
        check_seal(
            getattr(request, SEAL, None),
            request.id,
            job_id if isinstance(job_id, str) else str(request.id),
            redis=rt.store.redis,
            prefix=rt.settings.prefix,
            redelivered=bool(delivery.get("redelivered")),
        )


@task_postrun.connect(weak=False)
def _end_job_scope(task: Any = None, **_: Any) -> None:
    """End the job's secret scope a tandem task's step entered, whatever its outcome. Celery
    sends this signal once it has logged the outcome; ``after_return`` would miss a task ignored
    (an intake handed back for a newer worker), retried or rejected, and leave its job's scope
    on the thread that ran it."""
    if isinstance(task, TandemTask):
        enter_scope(None)
