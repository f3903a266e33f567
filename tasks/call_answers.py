"""Where a public task's answer may be stored, and the answer of a message no task ran.

Every call of a public task (``tandem.infer``, the control tasks: ``task_args.PUBLIC_TASKS``) gets
an answer under its task id, the Celery result the caller waits on. Two rules:

- **Never under a job's id.** An answer is stored only where it overwrites nothing: the task id
  names no job (no record, not even ``submit``'s ``queued`` one) and has no Celery result (a job's,
  or this message's own first answer: a message sent again keeps the answer it got). A message
  under the id of a job that exists (a copy of a real job's message, by mistake or forged) is only
  logged (``may_store_answer``).
- **Even for a message no task ran.** A message the worker drops unread (a body that is not JSON
  or not ``[args, kwargs, embed]``, ``args`` or ``kwargs`` null, nested deeper than a decoder goes,
  an ``eta``, ``expires`` or ``timelimit`` header that is not one) is dead-lettered by the
  worker's consumer (``tandem.broker_config.consumer``), which tells ``answer_dropped``: when its
  headers name a public task and an id, the caller gets the answer a call that does not fit gets
  (``tandem.infer``: ``TaskCallError``; a control task: ``{"job_id", "accepted": false, "error",
  "reason": "invalid"}``), naming what was wrong and the call's shape, unless the message asked
  for no result (``ignore_result``). With message signing on (``accept_content`` is ``["auth"]``)
  nothing is answered: a message the worker could not read is one it could not verify, and its
  headers are never signed, so nothing of it is trusted (docs/security.md).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from tandem.tasks.errors import TaskCallError
from tandem.tasks.task_args import INTAKE, PUBLIC_TASKS, call_shape

log = logging.getLogger("tandem.tasks")

MAX_ANSWERED_ID = 1024
"""The longest task id a dropped message is answered under (a longer one is only dead-lettered)."""
REASON_CHARS = 300
"""How much of why a message was dropped its answer repeats."""


def may_store_answer(task_id: Any, backend: Any) -> bool:
    """Whether an answer may be stored under ``task_id``: it names no job (no record) and has no
    Celery result in ``backend`` yet (see the module docstring)."""
    from tandem.tasks.runtime import get_runtime  # the runtime imports the app: only when run

    if not isinstance(task_id, str) or not task_id:
        return False
    if get_runtime().machine.record(task_id):
        return False
    return bool(backend.get_task_meta(task_id).get("status") == "PENDING")


def answer_dropped(app: Any, headers: Mapping[str, Any], reason: str) -> None:
    """Answer the caller of a message the worker dropped unread (see the module docstring); a
    message of another task, with no usable id, or whose id names a job, gets nothing."""
    if list(app.conf.accept_content or ()) == ["auth"]:  # signed messages only: trust none of it
        return
    task, task_id = headers.get("task"), headers.get("id")
    if not isinstance(task, str) or task not in PUBLIC_TASKS or task not in app.tasks:
        return
    if not isinstance(task_id, str) or not 0 < len(task_id) <= MAX_ANSWERED_ID:
        return
    registered = app.tasks[task]
    if headers.get("ignore_result") is True:
        return
    backend = registered.backend
    if not may_store_answer(task_id, backend):
        log.warning("a dropped %s message under the id %r of a job or an answer: not answered", task, task_id)
        return
    why = reason if len(reason) <= REASON_CHARS else reason[: REASON_CHARS - 3] + "..."
    error = f"{task} takes {call_shape(task, registered.run)}: the message could not be read ({why}); "
    error += "nothing was done"
    if task == INTAKE:
        backend.mark_as_failure(task_id, TaskCallError(error))
    else:
        backend.mark_as_done(
            task_id, {"job_id": None, "accepted": False, "error": error, "reason": "invalid"}
        )
    log.warning("answered the dropped %s message %s: %s", task, task_id, error)


__all__ = ["MAX_ANSWERED_ID", "answer_dropped", "may_store_answer"]
