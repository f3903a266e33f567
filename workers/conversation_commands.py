"""The ``tandem`` commands of a job's conversation: ``message`` (a person's message into a running
job) and ``follow-up`` (a new goal on an ended job, in its thread). Each returns its exit status
(``tandem.workers.exit_codes``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from tandem.workers import exit_codes


def add_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    owner_option: Callable[[argparse.ArgumentParser], None],
    follow_options: Callable[[argparse.ArgumentParser], None],
) -> None:
    """The conversation commands' parsers (``owner_option`` adds ``--owner``, ``follow_options``
    the options of a command that shows the job it starts)."""
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

    fu = sub.add_parser(
        "follow-up",
        help="a new goal on an ended job: a new job in its thread, which reads the thread so far",
        description="The new job has JOB's spec with GOAL, and reads the thread so far (each earlier "
        "job's goal, the person's messages and its answer, within TANDEM_MAX_THREAD_CHARS). Its events "
        "are shown live, as with `tandem run`. A job that has not ended refuses it (exit 2).",
    )
    fu.add_argument("job_id")
    fu.add_argument("goal", help="the new goal")
    fu.add_argument("--key", default=None, metavar="KEY", help="idempotency key (the same key: the same job)")
    owner_option(fu)
    follow_options(fu)


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


def follow_up(args: argparse.Namespace) -> int:
    """``tandem follow-up JOB GOAL``."""
    from tandem.tasks import job
    from tandem.tasks.errors import ResumeRefused
    from tandem.workers.job_commands import show_to_end

    source = job(args.job_id)
    source.owner = args.owner
    try:
        new = source.follow_up(args.goal, idempotency_key=args.key)
    except ResumeRefused as exc:
        print(f"tandem: follow-up refused ({exc.reason}): {exc}", file=sys.stderr)
        return exit_codes.USAGE
    spec = source._store.spec(source.id)
    thread = (spec.thread_id if spec is not None else None) or source.id
    print(f"job {new.id} follows up on {args.job_id} (thread {thread})", flush=True)
    if args.detach:
        print(new.id)
        return exit_codes.OK
    return show_to_end(new, "0", args)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"message": message, "follow-up": follow_up}
"""The conversation commands by name."""

__all__ = ["COMMANDS", "add_parsers", "follow_up", "message"]
