"""The ``tandem`` command: workers, jobs, the HTTP API, Flower and the one-command demo."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from tandem.broker_config.errors import SettingsError
from tandem.reasoner.errors import ReasonerError
from tandem.workers.errors import WorkerError

ROLES = ("thinker", "actor", "tools", "all")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tandem", description="LLM reasoning jobs on Celery.")
    sub = p.add_subparsers(dest="command", required=True)

    w = sub.add_parser("worker", help="start a worker for a role's queue")
    w.add_argument("role", choices=ROLES)
    w.add_argument("--concurrency", "-c", type=int, default=None, help="threads or processes (default 4)")
    w.add_argument(
        "--pool",
        "-P",
        choices=("threads", "gevent", "prefork", "solo"),
        default="threads",
        help="threads (default: model and tool calls wait on I/O), gevent (the 'gevent' extra), prefork",
    )
    w.add_argument(
        "--task-events",
        "-E",
        action="store_true",
        help="send Celery task events from the start (TANDEM_TASK_EVENTS; Flower turns them on itself)",
    )
    w.add_argument("--no-intake", action="store_true", help="do not consume the intake queue (tandem.infer)")
    w.add_argument("--loglevel", "-l", default="INFO")
    w.add_argument("--hostname", "-n", default=None)

    r = sub.add_parser("run", help="submit a job and show it live")
    r.add_argument("goal")
    _job_options(r)
    r.add_argument(
        "--embedded",
        action="store_true",
        help="start Redis (if none answers) and one worker per role for this run",
    )

    d = sub.add_parser("demo", help="run the offline demo job through the whole distributed pipeline")
    d.add_argument("goal", nargs="?", default=None)
    _job_options(d)

    s = sub.add_parser("status", help="show a job's status and result")
    s.add_argument("job_id")

    he = sub.add_parser(
        "health",
        help="exit 0 when Redis (the job store) and the broker answer, else 3 (a container probe)",
        description="Prints one line: how long each took to answer, and the messages waiting in each "
        "queue; or which does not answer and why. Imports neither Celery nor LiteLLM.",
    )
    he.add_argument("--timeout", type=float, default=3.0, help="seconds each may take to answer (default 3)")

    h = sub.add_parser("hosts", help="show each model host's in-flight calls, budgets and back-off")
    h.add_argument("--json", action="store_true", help="print JSON instead of a table")

    c = sub.add_parser("cancel", help="cancel a job")
    c.add_argument("job_id")

    rs = sub.add_parser(
        "resume",
        help="continue a failed, cancelled or truncated job from its last stored step",
        description="The job goes on under the same id: stored model replies and tool results are "
        "reused, never redone. Then its events are shown live, as with `tandem run`.",
    )
    rs.add_argument("job_id")
    rs.add_argument("--max-rounds", type=int, default=None, help="raise the job's round budget to N")
    _follow_options(rs)

    fk = sub.add_parser(
        "fork",
        help="start a new job from the first rounds of an ended job",
        description="The new job holds rounds 0..R-1 of JOB and runs on from round R with the same "
        "spec (the goal replaced with --goal); JOB is untouched.",
    )
    fk.add_argument("job_id")
    fk.add_argument(
        "--round", type=int, required=True, metavar="R", help="keep the first R rounds (0..R-1) and go on"
    )
    fk.add_argument("--goal", default=None, help="the new job's goal (default: the same goal)")
    fk.add_argument("--max-rounds", type=int, default=None, help="the new job's round budget")
    _follow_options(fk)

    ap = sub.add_parser(
        "approve",
        help="decide on a job's tool calls awaiting approval: approve (by default), edit or reject",
        description="Approves every undecided call of the job, or only --call N; --reject REASON "
        "rejects instead (the model reads the reason); --args JSON approves call N with these "
        "arguments instead of the model's. `tandem status JOB` lists the calls waiting.",
    )
    ap.add_argument("job_id")
    ap.add_argument("--call", type=int, default=None, metavar="N", help="the call's index (default: all)")
    ap.add_argument("--reject", default=None, metavar="REASON", help="reject, with this reason")
    ap.add_argument("--args", default=None, metavar="JSON", help="approve call N with these arguments")
    ap.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for a worker to apply it (default 30)"
    )

    wa = sub.add_parser("watch", help="follow a job's events live (started anywhere)")
    wa.add_argument("job_id")
    wa.add_argument(
        "--from-now", action="store_true", help="show only new events (default: from the job's first event)"
    )
    wa.add_argument("--no-tokens", action="store_true", help="do not print model tokens as they stream")
    wa.add_argument("--timeout", type=float, default=None, help="stop following after this many seconds")

    a = sub.add_parser("api", help="start the HTTP API (server-sent events) and the job console")
    a.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    a.add_argument("--port", type=int, default=8000)
    a.add_argument("--log-level", default="info")

    f = sub.add_parser(
        "flower",
        help="start Flower, the Celery monitoring UI",
        description="Credentials come from FLOWER_BASIC_AUTH (user:password) or a file, never from "
        "the command line; Flower refuses to listen beyond loopback without them.",
    )
    f.add_argument("--port", type=int, default=5555)
    f.add_argument("--address", default="127.0.0.1")
    f.add_argument(
        "--basic-auth-file", default=None, help="a file holding user:password (else FLOWER_BASIC_AUTH)"
    )
    f.add_argument("--basic-auth", default=None, help=argparse.SUPPRESS)  # refused: argv is public
    return p


def _job_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reasoner", choices=("dual", "mono", "react"), default="dual")
    p.add_argument("--context", default="")
    p.add_argument("--max-rounds", type=int, default=20)
    p.add_argument("--actions", default="", help="comma-separated toolkit actions to start from")
    p.add_argument("--tools", default=None, help="comma-separated allow-list of tools")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the result")
    p.add_argument("--json", action="store_true", help="print the JobResult as JSON at the end")
    p.add_argument("--no-tokens", action="store_true", help="do not print model tokens as they stream")


def _follow_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--detach", action="store_true", help="print the job id and return at once")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the result")
    p.add_argument("--json", action="store_true", help="print the JobResult as JSON at the end")
    p.add_argument("--no-tokens", action="store_true", help="do not print model tokens as they stream")


def _spec(args: argparse.Namespace, goal: str) -> dict[str, object]:
    spec: dict[str, object] = {
        "goal": goal,
        "context": args.context,
        "reasoner": args.reasoner,
        "max_rounds": args.max_rounds,
        "actions": [a for a in args.actions.split(",") if a],
    }
    if args.tools is not None:
        spec["tools"] = [t for t in args.tools.split(",") if t]
    return spec


def patch_for_gevent() -> None:
    """Make the standard library cooperative (sockets, threads, locks, ``time.sleep``) before the
    worker imports Celery, Redis, httpx or LiteLLM, as ``celery worker -P gevent`` does: without it
    a blocking call would stop every greenlet of the process."""
    try:
        from gevent import monkey
    except ImportError:
        raise WorkerError(
            "--pool gevent needs the gevent package: pip install 'tandem[gevent]' (or use --pool threads)"
        ) from None
    monkey.patch_all()


def _worker(args: argparse.Namespace) -> int:
    if args.pool == "gevent":
        patch_for_gevent()
    from tandem.tasks.app import app, settings
    from tandem.tasks.worker_signals import check_start

    problem = check_start()  # before Celery starts: a broken toolkit is a clear one-line error
    if problem is not None:
        print(f"tandem: {problem}", file=sys.stderr)
        return 2

    queues = ["thinker", "actor", "tools"] if args.role == "all" else [args.role]
    if not args.no_intake:
        queues.append(settings.intake_queue)
    argv = [
        "worker",
        "--queues",
        ",".join(queues),
        "--pool",
        args.pool,
        "--concurrency",
        str(args.concurrency or 4),
        "--loglevel",
        args.loglevel,
        *(["--task-events"] if settings.task_events or args.task_events else []),
        "--without-mingle",
        "--without-gossip",
        "--hostname",
        args.hostname or f"{args.role}@%h",
    ]
    if args.pool == "solo":
        argv.remove("--concurrency")
        argv.remove(str(args.concurrency or 4))
    return run_celery(app, argv)


def run_celery(app: Any, argv: list[str]) -> int:
    """Run the ``celery`` command line for ``app`` and return its exit code (a worker that stops
    on an error exits non-zero, and so does ``tandem worker``)."""
    from celery.bin.celery import celery as celery_command
    from click.exceptions import Exit

    celery_command.params[0].default = app
    try:
        code = celery_command.main(args=argv, standalone_mode=False)
    except Exit as exc:
        code = exc.exit_code
    finally:
        celery_command.params[0].default = None
    return code if isinstance(code, int) else 0


def _follow(spec: dict[str, object], args: argparse.Namespace) -> int:
    from tandem.tasks import submit
    from tandem.workers.display import show_events

    handle = submit(spec)
    print(f"job {handle.id} submitted", flush=True)
    final = show_events(handle.events(timeout=args.timeout), tokens=not args.no_tokens)
    result = handle.result(timeout=5 if final else args.timeout)
    if args.json:
        print(result.model_dump_json(indent=2))
    return 0 if result.status == "completed" else 1


def _show_to_end(handle: Any, after: str, args: argparse.Namespace) -> int:
    from tandem.workers.display import show_events

    final = show_events(handle.events(after=after, timeout=args.timeout), tokens=not args.no_tokens)
    result = handle.result(timeout=5 if final else args.timeout)
    if args.json:
        print(result.model_dump_json(indent=2))
    return 0 if result.status == "completed" else 1


def _resume(args: argparse.Namespace) -> int:
    from tandem.tasks import job

    handle = job(args.job_id)
    newest = handle._store.redis.xrevrange(handle._store.key(handle.id, "events"), count=1)
    after = newest[0][0] if newest else "0"
    after = after.decode() if isinstance(after, bytes) else str(after)  # its events from the resume on
    handle.resume(args.max_rounds)
    print(f"job {handle.id} resumed", flush=True)  # where it goes on: its job_started event
    return 0 if args.detach else _show_to_end(handle, after, args)


def _fork(args: argparse.Namespace) -> int:
    from tandem.tasks import job

    forked = job(args.job_id).fork(args.round, args.goal, max_rounds=args.max_rounds)
    print(f"job {forked.id} forked from {args.job_id}: it keeps its first {args.round} round(s)", flush=True)
    if args.detach:
        print(forked.id)
        return 0
    return _show_to_end(forked, "0", args)


def _watch(args: argparse.Namespace) -> int:
    from tandem.tasks import job
    from tandem.workers.display import show_events

    handle = job(args.job_id)
    final = show_events(
        handle.events(after="$" if args.from_now else "0", timeout=args.timeout), tokens=not args.no_tokens
    )
    if final is None:
        state = handle.status().state
        print(f"job {handle.id}: {state}", flush=True)
        return 0 if state == "completed" else 1
    return 0 if final.status == "completed" else 1


def _approve(args: argparse.Namespace) -> int:
    import json

    from celery.exceptions import TimeoutError as CeleryTimeout

    from tandem.tasks import job

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
    try:
        if args.reject is not None:
            decided = handle.reject(args.reject, args.call, timeout=args.timeout)
        else:
            decided = handle.approve(args.call, args=edited, timeout=args.timeout)
    except CeleryTimeout:
        return refuse(
            f"no worker applied the decision within {args.timeout:g} s: are workers running? "
            f"(`tandem status {args.job_id}` shows whether it was applied)"
        )
    for d in decided:
        what = "approved" if d.approve else f"rejected: {d.reason}"
        print(f"call {d.index}: {what}" + (f" with args {json.dumps(d.args)}" if d.args is not None else ""))
    record = handle.pending_approval()
    left = [p.index for p in record.undecided()] if record is not None else []
    going_on = "every call is decided; the job goes on"
    print(f"job {handle.id}: " + (f"still waiting for calls {left}" if left else going_on))
    return 0


def _embedded_run(spec: dict[str, object], args: argparse.Namespace) -> int:
    from tandem.workers.embedded import EmbeddedRuntime

    requested = os.environ.get("TANDEM_BROKER_URL")
    with EmbeddedRuntime(requested) as runtime:
        where = (
            "the Redis at TANDEM_BROKER_URL"
            if runtime.redis is None
            else f"an embedded Redis ({runtime.url})"
        )
        print(f"tandem: using {where}; starting one worker per role (thinker, actor, tools)…", flush=True)
        for var in ("TANDEM_BROKER_URL", "TANDEM_RESULT_BACKEND", "TANDEM_REDIS_URL"):
            os.environ[var] = runtime.url
        from tandem.tasks.app import app, settings

        for role in ("thinker", "actor"):
            if settings.role(role).is_demo:
                print(
                    f"tandem: no model configured for the {role} (TANDEM_{role.upper()}_MODEL): "
                    "using the built-in offline demo model",
                    flush=True,
                )
        assert runtime.workers is not None
        took = runtime.workers.wait_ready(app)
        print(f"tandem: workers ready in {took:.1f} s", flush=True)
        return _follow(spec, args)


def _enable_task_events() -> None:
    """Turn the running workers' task events on now (they are off by default, see
    ``TANDEM_TASK_EVENTS``): Flower broadcasts the same only 5 s after it starts, and would miss
    the tasks of that time. A broker that does not answer is Flower's to report."""
    try:
        from tandem.tasks.app import app

        app.control.enable_events()
    except Exception as exc:  # Flower starts anyway, and asks again every 5 s
        print(f"tandem: could not ask the workers for task events yet ({exc}); Flower will", file=sys.stderr)


def _flower(args: argparse.Namespace) -> int:
    """Exec ``celery flower`` with its credentials in the environment (``FLOWER_BASIC_AUTH``, which
    Flower reads itself), never in argv where ``ps`` shows them to every user of the host."""
    from tandem.broker_config.settings import LOOPBACK_ADDRESSES, flower_basic_auth

    if args.basic_auth is not None:
        print(
            "tandem: --basic-auth puts the password on the command line, where any local user can read "
            "it: set FLOWER_BASIC_AUTH=user:password or use --basic-auth-file instead",
            file=sys.stderr,
        )
        return 2
    auth = flower_basic_auth(file=args.basic_auth_file)
    dropped = ("FLOWER_BASIC_AUTH", "FLOWER_UNAUTHENTICATED_API")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    if auth is None and args.address not in LOOPBACK_ADDRESSES:
        print(
            f"tandem: Flower would listen on {args.address!r} with no authentication, and its API can start "
            "tasks, revoke jobs and stop workers: set FLOWER_BASIC_AUTH=user:password (or "
            "--basic-auth-file), or keep --address 127.0.0.1 behind an authenticating proxy",
            file=sys.stderr,
        )
        return 2
    if auth is not None:
        env["FLOWER_BASIC_AUTH"] = auth
    _enable_task_events()
    cmd = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "tandem.tasks.app",
        "flower",
        f"--port={args.port}",
        f"--address={args.address}",
    ]
    os.execve(sys.executable, cmd, env)
    return 0  # not reached


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tandem`` console script."""
    args = _parser().parse_args(argv)
    if args.command == "health":  # a probe run every few seconds in each pod: light imports only
        from tandem.workers.health import run_health

        return run_health(args.timeout)
    if args.command == "worker":  # before anything imports prometheus_client
        from tandem.broker_config import process_metrics

        process_metrics.prepare(args.pool)
    from tandem.tasks.errors import JobError, RedisUnavailable
    from tandem.toolkit.errors import ToolkitError

    try:
        if args.command == "worker":
            return _worker(args)
        if args.command == "demo":
            from tandem.reasoner.demo import DEMO_GOAL

            return _embedded_run(_spec(args, args.goal or DEMO_GOAL), args)
        if args.command == "run":
            spec = _spec(args, args.goal)
            return _embedded_run(spec, args) if args.embedded else _follow(spec, args)
        if args.command == "status":
            from tandem.tasks import job

            handle = job(args.job_id)
            print(handle.status().model_dump_json(indent=2))
            result = handle._store.result(handle.id)
            if result is not None:
                print(result.model_dump_json(indent=2))
            return 0
        if args.command == "hosts":
            from tandem.tasks.runtime import get_runtime
            from tandem.workers.hosts import format_hosts, host_snapshots, hosts_json

            rt = get_runtime()
            snaps = host_snapshots(rt.redis, rt.settings)
            print(hosts_json(snaps) if args.json else format_hosts(snaps))
            return 0
        if args.command == "cancel":
            from tandem.tasks import job

            job(args.job_id).cancel()
            print(f"job {args.job_id}: cancellation requested")
            return 0
        if args.command == "approve":
            return _approve(args)
        if args.command == "watch":
            return _watch(args)
        if args.command == "resume":
            return _resume(args)
        if args.command == "fork":
            return _fork(args)
        if args.command == "api":
            from tandem.workers.api.server import serve

            return serve(args.host, args.port, log_level=args.log_level)
        if args.command == "flower":
            return _flower(args)
    except RedisUnavailable as exc:  # Redis did not answer for the whole of its bounded wait
        print(f"tandem: {exc}", file=sys.stderr)
        return 3
    except (ReasonerError, ToolkitError, JobError, SettingsError, WorkerError) as exc:
        print(f"tandem: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tandem: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
