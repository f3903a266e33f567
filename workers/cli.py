"""The ``tandem`` command: workers, jobs, the HTTP API, Flower and the one-command demo."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from tandem.workers.green import patch_if_asked

patch_if_asked(sys.argv[1:])  # before the imports below load sockets and selectors (see green.py)

from tandem.broker_config.errors import SettingsError  # noqa: E402
from tandem.reasoner.errors import ReasonerError  # noqa: E402
from tandem.workers import conversation_commands, exit_codes, extras, job_commands, reach  # noqa: E402
from tandem.workers.celery_run import patch_for_gevent, run_celery  # noqa: E402
from tandem.workers.errors import WorkerError  # noqa: E402
from tandem.workers.tenants import tenants_command  # noqa: E402

ROLES = ("thinker", "actor", "tools", "all")


def _parser() -> argparse.ArgumentParser:
    from tandem import __version__

    p = argparse.ArgumentParser(
        prog="tandem",
        description="LLM reasoning jobs on Celery.",
        epilog="Exit statuses: 0 ok (the job completed), 1 the job did not complete, 2 usage error, "
        "3 Redis or the broker does not answer, 4 the job was cancelled, 5 it was truncated.",
    )
    p.add_argument("--version", action="version", version=f"tandem {__version__}")
    p.add_argument("--debug", action="store_true", help="show the traceback of an error, not only its line")
    # ``--debug`` after the command too (``tandem status JOB --debug``); SUPPRESS keeps the global one.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_sub_parser(common))

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
    w.add_argument(
        "--ready-file",
        default=None,
        metavar="PATH",
        help="write PATH (the worker's pid) once the worker takes work: for a supervisor or a test",
    )

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
    sub.add_parser("tenants", help="tenant caps, jobs, quotas").add_argument("--json", action="store_true")
    vc = sub.add_parser(
        "version-check",
        help="count the live jobs by format version; exit 1 if this release does not read them all",
        description="Counts every live job by the versions of its spec and memory formats and says "
        "which this release reads. Exit 0 when it reads them all; 1 (with a line saying what to do) "
        "when some are newer or older: run it with the release you are about to roll out or back "
        "to (docs/upgrades.md).",
    )
    vc.add_argument("--json", action="store_true", help="print JSON instead of a table")

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
    _owner_option(rs)
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
    _owner_option(fk)
    _follow_options(fk)

    ap = sub.add_parser(
        "approve",
        help="decide on a job's tool calls awaiting approval: approve (by default), edit or reject",
        description="Approves every undecided call of the job, or only --call N; --reject REASON "
        "rejects instead (the model reads the reason); --args JSON approves call N with these "
        "arguments instead of the model's. The decision answers the job's current pause (or --pause ID, "
        "from `tandem status JOB`); one for a pause that has ended is refused (exit 2, nothing "
        "changes). No worker answering within --timeout withdraws it (exit 3: it never applies).",
    )
    ap.add_argument("job_id")
    ap.add_argument("--call", type=int, default=None, metavar="N", help="the call's index (default: all)")
    ap.add_argument("--reject", default=None, metavar="REASON", help="reject, with this reason")
    ap.add_argument("--args", default=None, metavar="JSON", help="approve call N with these arguments")
    ap.add_argument("--pause", default=None, metavar="ID", help="the pause answered (default: the current)")
    ap.add_argument("--key", default=None, metavar="KEY", help="idempotency key (the same key applies once)")
    _owner_option(ap)
    ap.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for a worker to apply it (default 30)"
    )

    an = sub.add_parser(
        "answer",
        help="answer the question a job waits on (a tool's ask, or the model's ask_person)",
        description="Answers the job's current question (or --pause ID, from `tandem status JOB`) with "
        'ANSWER: read as JSON when it is JSON (\'{"city": "Oslo"}\', 42, true), else as text (--text: '
        "always text). It must fit the question's answer schema (exit 2 saying why, nothing changes); "
        "an answer for a pause that has ended is refused (exit 2). No worker answering within --timeout "
        "withdraws it (exit 3: it never applies).",
    )
    an.add_argument("job_id")
    an.add_argument("answer", help="the answer: JSON, or text")
    an.add_argument("--text", action="store_true", help="send ANSWER as text even if it reads as JSON")
    an.add_argument("--pause", default=None, metavar="ID", help="the pause answered (default: the current)")
    an.add_argument("--key", default=None, metavar="KEY", help="idempotency key (the same key applies once)")
    _owner_option(an)
    an.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for a worker to store it (default 30)"
    )
    conversation_commands.add_parsers(sub, _owner_option, _follow_options)

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


def _sub_parser(common: argparse.ArgumentParser) -> type[argparse.ArgumentParser]:
    """The class of the commands' parsers: each inherits ``common``'s options."""

    class SubParser(argparse.ArgumentParser):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("parents", [common])
            super().__init__(*args, **kwargs)

    return SubParser


def _job_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reasoner", choices=("dual", "mono", "react"), default="dual")
    p.add_argument("--context", default="")
    p.add_argument("--max-rounds", type=int, default=20)
    p.add_argument("--actions", default="", help="comma-separated toolkit actions to start from")
    p.add_argument("--tools", default=None, help="comma-separated allow-list of tools")
    p.add_argument(
        "--webhook", action="append", default=[], metavar="URL", help="POST the job's end and pauses here"
    )
    p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the result")
    p.add_argument("--json", action="store_true", help="print the JobResult as JSON at the end")
    p.add_argument("--no-tokens", action="store_true", help="do not print model tokens as they stream")


def _owner_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--owner",
        default=None,
        metavar="TENANT",
        help="the tenant that owns the job (default: 'default'); another tenant's job is refused as unknown",
    )


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
    if args.webhook:  # docs/webhooks.md
        spec["webhooks"] = [{"url": url} for url in args.webhook]
    return spec


def _worker(args: argparse.Namespace) -> int:
    if args.pool == "gevent":
        patch_for_gevent()
    from tandem.broker_config.intake_lanes import IntakeLanes
    from tandem.tasks.app import app, settings
    from tandem.tasks.worker_signals import check_start

    problem = check_start()  # before Celery starts: a broken toolkit is a clear one-line error
    if problem is not None:
        print(f"tandem: {problem}", file=sys.stderr)
        return 2

    queues = ["thinker", "actor", "tools"] if args.role == "all" else [args.role]
    if not args.no_intake:  # the intake queue and its lanes (TANDEM_INTAKE_LANES)
        queues.extend(IntakeLanes.of(settings).queues)
    from tandem.workers.queue_check import refusal

    refused = refusal(app, settings, queues)  # a queue RabbitMQ made otherwise: one line, not a loop
    if refused is not None:
        print(f"tandem: {refused}", file=sys.stderr)
        return 2
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
    if args.ready_file:
        from tandem.tasks import worker_signals

        worker_signals.announce_ready_in(args.ready_file)
    return run_celery(app, argv)


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
        return job_commands.follow(spec, args)


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


REACHES: dict[str, str] = {
    "run": "both",
    "approve": "both",
    "answer": "both",
    "resume": "both",
    "fork": "both",
    "message": "both",
    "follow-up": "both",
    "status": "redis",
    "watch": "redis",
    "cancel": "redis",
    "hosts": "redis",
    "tenants": "redis",
    "version-check": "redis",
}
"""What each command asks before it starts (``reach.preflight``): Redis and the broker, or Redis
only (with the result backend when it is a Redis of its own). ``worker``, ``api`` and ``flower``
ride out an outage instead, and ``demo`` and ``run --embedded`` start their own Redis."""


def _preflight(args: argparse.Namespace) -> None:
    """``reach.Unreachable`` when what the command needs does not answer."""
    needs = REACHES.get(args.command)
    if needs is None or getattr(args, "embedded", False):
        return
    from tandem.tasks.runtime import get_runtime

    reach.preflight(get_runtime().settings, broker=needs == "both")


def _run(args: argparse.Namespace) -> int:
    """The command ``args.command``; its exit status."""
    if args.command == "worker":
        return _worker(args)
    if args.command == "demo":
        from tandem.reasoner.demo import DEMO_GOAL

        return _embedded_run(_spec(args, args.goal or DEMO_GOAL), args)
    if args.command == "run":
        from tandem.tasks.runtime import get_runtime
        from tandem.tasks.spec import validate_spec
        from tandem.tasks.webhooks.targets import check_webhooks

        spec = _spec(args, args.goal)
        if args.embedded:
            return _embedded_run(spec, args)
        settings = get_runtime().settings
        checked = validate_spec(spec, settings.limits)  # a refused spec is a usage error, first
        check_webhooks(checked.webhooks, settings.webhooks)
        _preflight(args)
        return job_commands.follow(spec, args)
    _preflight(args)
    if args.command == "status":
        from tandem.tasks import job

        handle = job(args.job_id)
        print(handle.status().model_dump_json(indent=2))
        result = handle._store.result(handle.id)
        if result is not None:
            print(result.model_dump_json(indent=2))
        return exit_codes.OK
    if args.command == "hosts":
        from tandem.tasks.runtime import get_runtime
        from tandem.workers.hosts import format_hosts, host_snapshots, hosts_json

        snaps = host_snapshots(get_runtime().redis, get_runtime().settings)
        print(hosts_json(snaps) if args.json else format_hosts(snaps))
        return exit_codes.OK
    if args.command == "tenants":
        return tenants_command(args.json)
    if args.command == "version-check":
        from tandem.tasks.runtime import get_runtime
        from tandem.tasks.state.versions import versions_in_flight
        from tandem.workers.version_check import advice, format_versions, versions_json

        rt = get_runtime()
        found = versions_in_flight(rt.redis, rt.settings.prefix)
        print(versions_json(found) if args.json else format_versions(found))
        return exit_codes.JOB_FAILED if advice(found) else exit_codes.OK
    if args.command == "cancel":
        from tandem.tasks import job

        job(args.job_id).cancel()
        print(f"job {args.job_id}: cancellation requested")
        return exit_codes.OK
    commands = {
        "approve": job_commands.approve,
        "answer": job_commands.answer,
        "watch": job_commands.watch,
        "resume": job_commands.resume,
        "fork": job_commands.fork,
        **conversation_commands.COMMANDS,
        "api": _api,
        "flower": _flower,
    }
    return commands[args.command](args)


def _api(args: argparse.Namespace) -> int:
    from tandem.workers.api.server import serve

    return serve(args.host, args.port, log_level=args.log_level)


def _say(exc: BaseException, line: str, code: int, debug: bool) -> int:
    """Print ``line`` (after the traceback with ``--debug``) and return ``code``."""
    if debug:
        traceback.print_exception(exc)
    print(f"tandem: {line}", file=sys.stderr, flush=True)
    return code


def _settings() -> Any:
    """The command's settings (read again if the runtime cannot be had)."""
    from tandem.broker_config.settings import Settings

    try:
        from tandem.tasks.runtime import get_runtime

        return get_runtime().settings
    except Exception:  # the settings were read before anything connected; read them again
        return Settings.from_env()


def _unreachable_line(exc: BaseException) -> str:
    """The line for a connection error the command gave up on (``reach.describe``)."""
    return reach.describe(_settings(), exc)


def _refused_line(exc: BaseException, command: str) -> str:
    """The line for Redis's ``NOPERM`` while the command ran (``acl_refusals.command_line``)."""
    from tandem.broker_config.acl_refusals import command_line

    return command_line(_settings(), exc, command)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tandem`` console script; its exit statuses are in
    ``tandem.workers.exit_codes``."""
    args = _parser().parse_args(argv)
    refused = extras.refusal(args.command, embedded=getattr(args, "embedded", False))
    if refused is not None:  # a core (client-side) install: before anything of the stack is imported
        print(f"tandem: {refused}", file=sys.stderr)
        return exit_codes.USAGE
    if args.command == "health":  # a probe run every few seconds in each pod: light imports only
        from tandem.workers.health import run_health

        return run_health(args.timeout)
    if args.command == "worker":  # before anything imports prometheus_client
        from tandem.broker_config import process_metrics

        process_metrics.prepare(args.pool)
    from kombu.exceptions import OperationalError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import NoPermissionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    from tandem.broker_config.acl_refusals import refused_error
    from tandem.tasks.errors import JobError, JobLostError, JobTimeout, RedisUnavailable
    from tandem.toolkit.errors import ToolkitError

    debug = bool(args.debug)
    try:
        return _run(args)
    except reach.Unreachable as exc:  # before the command started: no traceback worth showing
        cause = exc.__cause__
        return _say(cause or exc, str(exc), exit_codes.UNREACHABLE, debug and cause is not None)
    except RedisUnavailable as exc:  # Redis went away while the command ran, for its whole window
        line = f"{_unreachable_line(exc)} (the job may still be running: `tandem status` tells, then)"
        return _say(exc, line, exit_codes.UNREACHABLE, debug)
    except (RedisConnectionError, RedisTimeoutError, OperationalError, NoPermissionError) as exc:
        denied = refused_error(exc)  # Redis answered, but not to this user: a setting, not an outage
        if denied is not None:
            return _say(exc, _refused_line(denied, args.command), exit_codes.USAGE, debug)
        return _say(exc, _unreachable_line(exc), exit_codes.UNREACHABLE, debug)
    except JobTimeout as exc:  # the job did not complete in the time given, and goes on
        line = f"{exc}: it goes on (`tandem watch JOB_ID` follows it, `tandem cancel JOB_ID` stops it)"
        return _say(exc, line, exit_codes.JOB_FAILED, debug)
    except JobLostError as exc:
        return _say(exc, str(exc), exit_codes.JOB_FAILED, debug)
    except (ReasonerError, ToolkitError, JobError, SettingsError, WorkerError) as exc:
        return _say(exc, str(exc), exit_codes.USAGE, debug)
    except KeyboardInterrupt as exc:
        return _say(exc, "interrupted", exit_codes.INTERRUPTED, False)


if __name__ == "__main__":
    sys.exit(main())
