"""How ``tandem worker`` starts Celery's worker: gevent's patching first, when asked for, then
Celery's ``worker`` command alone (``run_celery``)."""

from __future__ import annotations

import os
from typing import Any

from tandem.workers.errors import WorkerError


def patch_for_gevent() -> None:
    """Make the standard library cooperative (sockets, threads, locks, ``time.sleep``) before the
    worker imports Celery, Redis, httpx or LiteLLM, as ``celery worker -P gevent`` does: without it
    a blocking call would stop every greenlet of the process."""
    try:
        from gevent import monkey
    except ImportError:
        raise WorkerError(
            "--pool gevent needs the gevent package: pip install 'tandem-llm[gevent]' (or use --pool threads)"
        ) from None
    if not monkey.is_module_patched("socket"):  # the command's start did it (green.py)
        monkey.patch_all()


def run_celery(app: Any, argv: list[str]) -> int:
    """Run Celery's ``worker`` command (``argv``: ``["worker", ...]``) for ``app``; its exit code. The
    command alone, with the context the ``celery`` group gives it: the group imports every command
    and plugin (Flower, tornado, prompt_toolkit), 0.3 s of CPU per worker start."""
    from celery.bin.base import CLIContext
    from celery.bin.worker import worker as worker_command
    from click.exceptions import Exit

    if argv[:1] != ["worker"]:
        raise ValueError(f"run_celery runs the worker command, not {argv[:1]!r}")
    no_color = os.environ.get("NO_COLOR", "").strip().lower() not in ("", "0", "false", "f", "no", "n", "off")
    obj = CLIContext(app=app, no_color=no_color, workdir=None, quiet=False)
    try:
        code = worker_command.main(args=argv[1:], prog_name="celery worker", obj=obj, standalone_mode=False)
    except Exit as exc:
        code = exc.exit_code
    return code if isinstance(code, int) else 0


__all__ = ["patch_for_gevent", "run_celery"]
