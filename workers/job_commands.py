"""The ``tandem`` commands that act on jobs: ``run`` (following the job it submits), ``watch``,
``resume``, ``fork``, ``approve`` and ``answer``. Each returns its exit status
(``tandem.workers.exit_codes``); the errors they raise are turned into one line by
``tandem.workers.cli.main``."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from tandem.workers import exit_codes


def follow(spec: dict[str, object], args: argparse.Namespace) -> int:
    from tandem.tasks import submit

    handle = submit(spec)
    print(f"job {handle.id} submitted", flush=True)
    return show_to_end(handle, "0", args)


def intake_of(handle: Any, settings: Any) -> str:
    """The intake queue (or lane, ``TANDEM_INTAKE_LANES``) the job of ``handle`` was sent to: its
    tenant's, read from its record when the handle does not know it."""
    from tandem.broker_config.intake_lanes import IntakeLanes

    lanes = IntakeLanes.of(settings)
    owner = handle.owner
    if lanes.count and owner is None:
        try:
            found = handle._store.status(handle.id)
        except Exception:  # Redis away: the hint reads nothing either
            found = None
        owner = None if found is None else found.owner
    return lanes.lane(owner)


def show_to_end(handle: Any, after: str, args: argparse.Namespace) -> int:
    """Show the job's events live until it ends, then its exit status (``exit_codes.for_state``);
    on stderr, a hint when no worker consumes the queue it waits on (``queue_hint``)."""
    from tandem.tasks.app import app, settings
    from tandem.tasks.errors import JobTimeout
    from tandem.workers.display import show_events
    from tandem.workers.queue_hint import for_handle

    deadline = time.monotonic() + args.timeout
    with for_handle(handle, app, intake_of(handle, settings)):
        final = show_events(handle.events(after=after, timeout=args.timeout), tokens=not args.no_tokens)
        # --timeout bounds the whole wait: the events' wait and then the result's
        try:
            result = handle.result(timeout=5 if final else max(0.1, deadline - time.monotonic()))
        except JobTimeout:
            state = handle.status().state
            raise JobTimeout(
                f"job {handle.id} has not ended after {args.timeout:g} s (state: {state})"
            ) from None
    if args.json:
        print(result.model_dump_json(indent=2))
    return exit_codes.for_state(result.status)


def resume(args: argparse.Namespace) -> int:
    from tandem.tasks import job

    handle = job(args.job_id)
    handle.owner = args.owner
    newest = handle._store.redis.xrevrange(handle._store.key(handle.id, "events"), count=1)
    after = newest[0][0] if newest else "0"
    after = after.decode() if isinstance(after, bytes) else str(after)  # its events from the resume on
    handle.resume(args.max_rounds)
    print(f"job {handle.id} resumed", flush=True)  # where it goes on: its job_started event
    return 0 if args.detach else show_to_end(handle, after, args)


def fork(args: argparse.Namespace) -> int:
    from tandem.tasks import job

    source = job(args.job_id)
    source.owner = args.owner
    forked = source.fork(args.round, args.goal, max_rounds=args.max_rounds)
    print(f"job {forked.id} forked from {args.job_id}: it keeps its first {args.round} round(s)", flush=True)
    if args.detach:
        print(forked.id)
        return 0
    return show_to_end(forked, "0", args)


def watch(args: argparse.Namespace) -> int:
    from tandem.tasks import job
    from tandem.tasks.app import app, settings
    from tandem.workers.display import show_events
    from tandem.workers.queue_hint import for_handle

    handle = job(args.job_id)
    with for_handle(handle, app, intake_of(handle, settings)):
        final = show_events(
            handle.events(after="$" if args.from_now else "0", timeout=args.timeout),
            tokens=not args.no_tokens,
        )
    if final is None:
        state = handle.status().state
        print(f"job {handle.id}: {state}", flush=True)
        return exit_codes.for_state(state)
    return exit_codes.for_state(final.status)


def approve(args: argparse.Namespace) -> int:
    import json

    from tandem.tasks import job
    from tandem.tasks.errors import DecisionTimeout, StalePauseError

    def refuse(message: str) -> int:
        print(f"tandem: {message}", file=sys.stderr)
        return 2

    edited = None
    if args.args is not None:
        if args.call is None or args.reject is not None:
            return refuse("--args edits one approved call: give it with --call N and without --reject")
        try:
            edited = json.loads(args.args)
        except ValueError as exc:
            return refuse(f'--args is not JSON ({exc}): write an object, e.g. \'{{"to": "a@b.c"}}\'')
        if not isinstance(edited, dict):
            return refuse(f"--args must be a JSON object of the tool's arguments, got {args.args!r}")
    if args.reject is not None and not args.reject.strip():
        return refuse("--reject needs a reason (the model reads it)")
    handle = job(args.job_id)
    handle.owner = args.owner
    named = {"pause_id": args.pause, "idempotency_key": args.key, "timeout": args.timeout}
    if args.pause is None:  # the pause current now, named so a decision arriving after it ended is refused
        current = handle.pending_approval()
        named["pause_id"] = current.pause_id if current is not None and not current.decided else None
    try:
        if args.reject is not None:
            decided = handle.reject(args.reject, args.call, **named)
        else:
            decided = handle.approve(args.call, args=edited, **named)
    except StalePauseError as exc:
        return refuse(f"stale pause: {exc}")
    except DecisionTimeout as exc:
        print(f"tandem: {exc}", file=sys.stderr)
        return exit_codes.UNREACHABLE
    print(f"job {handle.id}, pause {named['pause_id'] or '(current)'}:")
    for d in decided:
        what = "approved" if d.approve else f"rejected: {d.reason}"
        print(f"call {d.index}: {what}" + (f" with args {json.dumps(d.args)}" if d.args is not None else ""))
    record = handle.pending_approval()
    left = [p.index for p in record.undecided()] if record is not None else []
    going_on = "every call is decided; the job goes on"
    print(f"job {handle.id}: " + (f"still waiting for calls {left}" if left else going_on))
    return 0


def answer(args: argparse.Namespace) -> int:
    """``tandem answer JOB ANSWER``: answer the question the job waits on (see ``tandem answer -h``)."""
    import json

    from tandem.tasks import job
    from tandem.tasks.errors import DecisionRefused, DecisionTimeout, StalePauseError

    value: Any = args.answer
    if not args.text:
        try:
            value = json.loads(args.answer)
        except ValueError:
            value = args.answer  # not JSON: the answer is this text
    handle = job(args.job_id)
    handle.owner = args.owner
    try:
        stored = handle.answer(value, pause_id=args.pause, idempotency_key=args.key, timeout=args.timeout)
    except StalePauseError as exc:
        print(f"tandem: stale pause: {exc}", file=sys.stderr)
        return 2
    except DecisionTimeout as exc:
        print(f"tandem: {exc}", file=sys.stderr)
        return exit_codes.UNREACHABLE
    except DecisionRefused as exc:
        print(f"tandem: {exc}", file=sys.stderr)
        return 2
    record = handle.pending_question()
    pause = record.pause_id if record is not None else args.pause
    print(
        f"job {handle.id}, pause {pause}: answered {json.dumps(stored, ensure_ascii=False)}; the job goes on"
    )
    return 0


__all__ = ["answer", "approve", "follow", "fork", "resume", "show_to_end", "watch"]
