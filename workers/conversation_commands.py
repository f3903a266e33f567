"""The ``tandem`` commands of a job's conversation: ``message`` (a person's message into a running
job). Each returns its exit status (``tandem.workers.exit_codes``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from tandem.workers import exit_codes


def add_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    owner_option: Callable[[argparse.ArgumentParser], None],
) -> None:
    """The conversation commands' parsers (``owner_option`` adds ``--owner``)."""
    ms = sub.add_parser(
        "message",
        help="send a message (a hint, a correction, a constraint) into a running job",
        description="The job's leading model (the Thinker of a dual job, the Actor otherwise) reads "
        "TEXT at the start of its next round, once; it stays in the job's memory. A job that has "
        "ended refuses it (exit 2, nothing added); no worker answering within --timeout withdraws "
        "it (exit 3: it never reaches the job).",
    )
    ms.add_argument("job_id")
    ms.add_argument("text", help="the message")
    ms.add_argument("--key", default=None, metavar="KEY", help="idempotency key (the same key adds it once)")
    owner_option(ms)
    ms.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for a worker (default 30)")


def message(args: argparse.Namespace) -> int:
    """``tandem message JOB TEXT``."""
    from tandem.tasks import job
    from tandem.tasks.errors import MessageRefused

    handle = job(args.job_id)
    handle.owner = args.owner
    try:
        message_id = handle.message(args.text, idempotency_key=args.key, timeout=args.timeout)
    except MessageRefused as exc:
        print(f"tandem: message refused ({exc.reason}): {exc}", file=sys.stderr)
        return exit_codes.UNREACHABLE if exc.reason == "withdrawn" else exit_codes.USAGE
    print(f"job {handle.id}: message {message_id} stored; the job reads it at the start of its next round")
    return exit_codes.OK


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"message": message}
"""The conversation commands by name."""

__all__ = ["COMMANDS", "add_parsers", "message"]
