"""The ``tandem`` command: argument parsing, the job spec it builds, and what it hands to Celery.

Nothing here needs Redis: workers and Flower are intercepted where they would start, and the
``run`` error path fails at spec validation, before anything is sent.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tandem.broker_config import process_metrics
from tandem.workers import cli


def parse(*argv: str) -> argparse.Namespace:
    return cli._parser().parse_args(list(argv))


# -- parsing ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["thinker", "actor", "tools", "all"])
def test_worker_roles(role: str) -> None:
    args = parse("worker", role)
    assert (args.command, args.role, args.pool, args.concurrency, args.no_intake) == (
        "worker",
        role,
        "threads",
        None,
        False,
    )


def test_worker_options() -> None:
    args = parse("worker", "actor", "-c", "8", "-P", "prefork", "--no-intake", "-l", "DEBUG", "-n", "a1@h")
    assert (args.concurrency, args.pool, args.no_intake, args.loglevel, args.hostname) == (
        8,
        "prefork",
        True,
        "DEBUG",
        "a1@h",
    )


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param([], id="no-command"),
        pytest.param(["worker"], id="no-role"),
        pytest.param(["worker", "judge"], id="unknown-role"),
        pytest.param(["worker", "actor", "--pool", "eventlet"], id="unknown-pool"),
        pytest.param(["run"], id="no-goal"),
        pytest.param(["run", "g", "--reasoner", "triple"], id="unknown-reasoner"),
        pytest.param(["run", "g", "--max-rounds", "many"], id="rounds-not-int"),
        pytest.param(["status"], id="no-job-id"),
        pytest.param(["launch"], id="unknown-command"),
    ],
)
def test_bad_arguments_exit_with_usage(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        cli.main(argv)
    assert caught.value.code == 2
    assert "usage: tandem" in capsys.readouterr().err


def test_run_defaults() -> None:
    args = parse("run", "count the words")
    assert (args.goal, args.reasoner, args.context, args.max_rounds, args.actions, args.tools) == (
        "count the words",
        "dual",
        "",
        20,
        "",
        None,
    )
    assert (args.timeout, args.json, args.embedded) == (600.0, False, False)


def test_demo_goal_is_optional() -> None:
    assert parse("demo").goal is None
    assert parse("demo", "What is 2 + 2?", "--reasoner", "mono").reasoner == "mono"


def test_status_cancel_and_flower_arguments() -> None:
    assert parse("status", "job-1").job_id == "job-1"
    assert parse("cancel", "job-2").job_id == "job-2"
    flower = parse("flower", "--port", "5556", "--basic-auth", "u:p")
    assert (flower.port, flower.address, flower.basic_auth) == (5556, "127.0.0.1", "u:p")


# -- the spec ------------------------------------------------------------------------------------------


def test_spec_from_the_options() -> None:
    args = parse(
        "run",
        "g",
        "--reasoner",
        "mono",
        "--context",
        "ctx",
        "--max-rounds",
        "7",
        "--actions",
        "compute,,report",
        "--tools",
        "add,word_count",
    )
    assert cli._spec(args, args.goal) == {
        "goal": "g",
        "context": "ctx",
        "reasoner": "mono",
        "max_rounds": 7,
        "actions": ["compute", "report"],
        "tools": ["add", "word_count"],
    }


def test_spec_without_tools_allows_every_tool_and_an_empty_list_allows_none() -> None:
    assert "tools" not in cli._spec(parse("run", "g"), "g")
    assert cli._spec(parse("run", "g", "--tools", ""), "g")["tools"] == []
    assert cli._spec(parse("run", "g"), "g")["actions"] == []


def test_the_spec_is_a_valid_job_spec() -> None:
    from tandem.tasks.spec import validate_spec

    args = parse("run", "g", "--actions", "a", "--tools", "t", "--max-rounds", "3")
    spec = validate_spec(cli._spec(args, args.goal))
    assert (spec.actions, spec.tools, spec.max_rounds) == (["a"], ["t"], 3)


# -- main -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        pytest.param(["run", "   "], "goal", id="blank-goal"),
        pytest.param(["run", "g", "--max-rounds", "0"], "max_rounds", id="no-rounds"),
    ],
)
def test_run_with_an_invalid_spec_fails_before_sending(
    argv: list[str], field: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tandem.client import submission as tasks_client

    sent: list[str] = []

    def default_app() -> Any:
        sent.append("app")
        raise AssertionError("an invalid spec must not reach the Celery app")

    monkeypatch.setattr(tasks_client, "_default_app", default_app)

    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("tandem: invalid job spec:") and f"field {field!r}" in err
    assert sent == []


class Captured:
    def __init__(self) -> None:
        self.argv: list[str] | None = None
        self.code = 0

    def __call__(self, app: object, argv: list[str]) -> int:
        self.argv = argv
        return self.code


@pytest.fixture
def worker_main(monkeypatch: pytest.MonkeyPatch) -> Captured:
    captured = Captured()
    monkeypatch.setattr(cli, "run_celery", captured)
    return captured


def test_the_worker_exits_with_celerys_exit_code(worker_main: Captured) -> None:
    worker_main.code = 70
    assert cli.main(["worker", "actor"]) == 70


def test_run_celery_returns_the_code_celery_exits_with(monkeypatch: pytest.MonkeyPatch) -> None:
    from celery.bin.worker import worker as worker_command
    from click.exceptions import Exit

    from tandem.tasks.app import app  # builds the app from the environment; nothing connects

    seen: list[tuple[object, list[str]]] = []

    def exits(args: list[str], prog_name: str, obj: Any, standalone_mode: bool) -> None:
        seen.append((obj.app, args))
        raise Exit(3)

    monkeypatch.setattr(worker_command, "main", exits)
    assert cli.run_celery(app, ["worker", "--pool", "threads"]) == 3
    assert seen == [(app, ["--pool", "threads"])]
    monkeypatch.setattr(worker_command, "main", lambda **kwargs: 0)
    assert cli.run_celery(app, ["worker"]) == 0
    with pytest.raises(ValueError, match="flower"):
        cli.run_celery(app, ["flower"])


def test_a_worker_start_imports_no_other_celery_command() -> None:
    """``tandem worker`` runs Celery's worker command alone: neither the ``celery`` group nor the
    plugins it loads (Flower) are imported in a worker process."""
    code = (
        "import sys\n"
        "from tandem.workers import cli\n"
        "from tandem.tasks.app import app\n"
        "cli.run_celery(app, ['worker', '--help'])\n"
        "print(sorted(m for m in ('celery.bin.celery', 'flower', 'click_repl') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "Start worker instance" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "[]"


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_a_role_worker_consumes_its_queue_and_the_intake(worker_main: Captured) -> None:
    from tandem.tasks.app import settings

    assert cli.main(["worker", "thinker"]) == 0
    argv = worker_main.argv
    assert argv is not None and argv[0] == "worker"
    assert option(argv, "--queues") == f"thinker,{settings.intake_queue}"
    assert (option(argv, "--pool"), option(argv, "--concurrency")) == ("threads", "4")
    assert option(argv, "--hostname") == "thinker@%h"
    assert "--task-events" not in argv  # Flower turns events on while it runs


def test_a_worker_with_intake_lanes_consumes_them_after_the_intake_queue(
    worker_main: Captured, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses

    from tandem.tasks import app as app_module

    monkeypatch.setattr(app_module, "settings", dataclasses.replace(app_module.settings, intake_lanes=3))
    intake = app_module.settings.intake_queue
    assert cli.main(["worker", "actor"]) == 0
    argv = worker_main.argv
    assert argv is not None
    assert option(argv, "--queues") == f"actor,{intake},{intake}.lane0,{intake}.lane1,{intake}.lane2"
    assert cli.main(["worker", "actor", "--no-intake"]) == 0
    assert option(worker_main.argv or [], "--queues") == "actor"


def test_task_events_on_request(worker_main: Captured) -> None:
    assert cli.main(["worker", "tools", "-E"]) == 0
    assert worker_main.argv is not None and "--task-events" in worker_main.argv


def test_a_gevent_pool(worker_main: Captured, monkeypatch: pytest.MonkeyPatch) -> None:
    patched: list[bool] = []  # the test process itself must not be monkey-patched
    monkeypatch.setattr(cli, "patch_for_gevent", lambda: patched.append(True))
    assert cli.main(["worker", "actor", "-P", "gevent", "-c", "200"]) == 0
    assert patched == [True]
    argv = worker_main.argv
    assert argv is not None
    assert (option(argv, "--pool"), option(argv, "--concurrency")) == ("gevent", "200")


def test_an_all_worker_without_intake(
    worker_main: Captured, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A prefork worker's processes write their metric samples to files (process_metrics): the
    # directory is the test's, and the variable goes with it.
    monkeypatch.setenv(process_metrics.ENV, str(tmp_path))
    assert cli.main(["worker", "all", "--no-intake", "-c", "2", "-P", "prefork", "-n", "w1@h"]) == 0
    argv = worker_main.argv
    assert argv is not None
    assert option(argv, "--queues") == "thinker,actor,tools"
    assert (option(argv, "--pool"), option(argv, "--concurrency"), option(argv, "--hostname")) == (
        "prefork",
        "2",
        "w1@h",
    )


def test_a_solo_worker_has_no_concurrency(worker_main: Captured) -> None:
    assert cli.main(["worker", "tools", "--pool", "solo"]) == 0
    argv = worker_main.argv
    assert argv is not None and "--concurrency" not in argv and option(argv, "--pool") == "solo"


Exec = list[tuple[str, list[str], dict[str, str]]]


@pytest.fixture
def execs(monkeypatch: pytest.MonkeyPatch) -> Exec:
    calls: Exec = []
    monkeypatch.setattr(cli.os, "execve", lambda path, argv, env: calls.append((path, list(argv), dict(env))))
    # No broadcast to whatever broker this machine has; the call itself is recorded.
    monkeypatch.setattr(cli, "_enable_task_events", lambda: calls.append(("enable_events", [], {})))
    monkeypatch.delenv("FLOWER_BASIC_AUTH", raising=False)
    monkeypatch.delenv("FLOWER_BASIC_AUTH_FILE", raising=False)
    return calls


def test_flower_execs_celery_flower_with_the_password_in_its_environment_not_argv(
    execs: Exec, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOWER_BASIC_AUTH", "ops:s3cret-pass")
    assert cli.main(["flower", "--port", "5600", "--address", "0.0.0.0"]) == 0

    # The running workers are asked for task events before Flower starts (it asks only 5 s later).
    assert execs[0][0] == "enable_events"
    ((path, argv, env),) = execs[1:]
    assert path == cli.sys.executable
    assert argv[1:] == [
        "-m",
        "celery",
        "-A",
        "tandem.tasks.app",
        "flower",
        "--port=5600",
        "--address=0.0.0.0",
    ]
    assert env["FLOWER_BASIC_AUTH"] == "ops:s3cret-pass"
    assert not any("s3cret" in a for a in argv)


def test_flower_reads_its_credentials_from_a_file(execs: Exec, tmp_path: Path) -> None:
    creds = tmp_path / "flower.auth"
    creds.write_text("ops:from-a-file-1\n")
    assert cli.main(["flower", "--address", "0.0.0.0", "--basic-auth-file", str(creds)]) == 0
    assert execs[-1][2]["FLOWER_BASIC_AUTH"] == "ops:from-a-file-1"


def test_flower_refuses_a_public_address_without_auth(
    execs: Exec, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["flower", "--address", "0.0.0.0"]) == 2
    assert not execs
    err = capsys.readouterr().err
    assert "'0.0.0.0'" in err and "FLOWER_BASIC_AUTH" in err


def test_flower_on_loopback_may_run_without_auth_but_never_unauthenticated_api(
    execs: Exec, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOWER_UNAUTHENTICATED_API", "true")
    assert cli.main(["flower"]) == 0
    assert "FLOWER_UNAUTHENTICATED_API" not in execs[-1][2] and "FLOWER_BASIC_AUTH" not in execs[-1][2]


def test_flower_refuses_a_password_on_the_command_line(
    execs: Exec, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["flower", "--basic-auth", "u:password1"]) == 2
    assert not execs and "command line" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["ops", "ops:short", ":nouser-password"])
def test_flower_refuses_malformed_or_weak_credentials(
    execs: Exec, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    monkeypatch.setenv("FLOWER_BASIC_AUTH", value)
    assert cli.main(["flower", "--address", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert not execs and "at least 8" in err and "short" not in err.replace("shorter", "")


# -- watch and api ----------------------------------------------------------------------------------


def test_watch_and_api_arguments() -> None:
    watch = parse("watch", "J1", "--from-now", "--no-tokens", "--timeout", "5")
    assert (watch.job_id, watch.from_now, watch.no_tokens, watch.timeout) == ("J1", True, True, 5.0)
    assert parse("watch", "J1").from_now is False
    api = parse("api")
    assert (api.host, api.port) == ("127.0.0.1", 8000)
    assert parse("run", "g", "--no-tokens").no_tokens is True


@pytest.fixture
def fake_runtime(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A runtime over fakeredis; the commands' check that Redis and the broker answer (which asks
    the real servers of the settings) records what it would ask instead."""
    import fakeredis

    from tandem.broker_config import Settings
    from tandem.tasks import runtime as runtime_module
    from tandem.workers import reach

    runtime = runtime_module.Runtime(Settings.from_env({}))
    runtime.__dict__["redis"] = fakeredis.FakeRedis()
    runtime.preflights = []
    monkeypatch.setattr(reach, "preflight", lambda settings, broker=True: runtime.preflights.append(broker))
    saved = runtime_module._runtime
    runtime_module._runtime = runtime
    yield runtime
    runtime_module._runtime = saved


def test_watch_prints_a_job_from_its_first_event(
    fake_runtime: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from tandem.tasks.job_events import ModelDelta, RoundStarted
    from tandem.tasks.spec import JobResult, JobSpec

    store = fake_runtime.store
    store.create("J1", JobSpec(goal="g"))
    store.publish("J1", RoundStarted(round=0, max_rounds=2))
    store.publish("J1", ModelDelta(round=0, role="actor", attempt="a", content="Hello, "))
    store.publish("J1", ModelDelta(round=0, role="actor", attempt="a", content="world"))
    store.finish(JobResult(job_id="J1", status="completed", deliverable="hi", rounds=1), ttl=60)

    assert cli.main(["watch", "J1", "--timeout", "30"]) == 0
    out = capsys.readouterr().out
    assert "── round 1 of 2" in out and "Actor (streaming):\n    Hello, world\n" in out
    assert "══ COMPLETED after 1 round(s)" in out

    assert cli.main(["watch", "J1", "--no-tokens", "--timeout", "30"]) == 0
    assert "Hello" not in capsys.readouterr().out


def test_watch_of_an_unknown_job_says_so(fake_runtime: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["watch", "nope"]) == 2
    assert "no job 'nope'" in capsys.readouterr().err


def test_api_refuses_a_public_address_without_tokens(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TANDEM_API_TOKENS", raising=False)
    assert cli.main(["api", "--host", "0.0.0.0"]) == 2
    assert "will not listen on '0.0.0.0' without tokens" in capsys.readouterr().err


# -- approve ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--args", "{}"], "--args edits one approved call", id="args-without-call"),
        pytest.param(
            ["--call", "1", "--args", "{}", "--reject", "no"], "without --reject", id="args-and-reject"
        ),
        pytest.param(["--call", "1", "--args", "{to: 1}"], "--args is not JSON", id="args-not-json"),
        pytest.param(["--call", "1", "--args", "[1]"], "must be a JSON object", id="args-not-object"),
        pytest.param(["--reject", " "], "--reject needs a reason", id="blank-reason"),
    ],
)
def test_approve_refuses_bad_options(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["approve", "J1", *argv]) == 2
    assert message in capsys.readouterr().err


@pytest.fixture
def parked(fake_runtime: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A job parked with calls 1 and 3 awaiting approval; decisions are applied at once, as a
    worker's ``tandem.decide`` would."""
    from tandem.client.handle import JobHandle
    from tandem.tasks.control.approvals import ApprovalStore, decisions_of
    from tandem.tasks.control.decide import decide_job
    from tests.tasks.test_approvals import park

    park(fake_runtime.store, "J1", now=time.time(), timeout_s=600)

    def decide(self: JobHandle, decisions: Any, *, timeout: float = 30.0, **named: Any) -> list[Any]:
        reply = decide_job(
            ApprovalStore(self._store), self.id, decisions, named["pause_id"], named["idempotency_key"]
        )
        return decisions_of(reply)

    monkeypatch.setattr(JobHandle, "decide", decide)
    return fake_runtime


def test_approve_one_call_with_edited_args_then_reject_the_rest(
    parked: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    edited = '{"to": "ann@example.com", "subject": "Report"}'
    assert cli.main(["approve", "J1", "--call", "1", "--args", edited]) == 0
    out = capsys.readouterr().out
    assert 'call 1: approved with args {"to": "ann@example.com", "subject": "Report"}' in out
    assert "still waiting for calls [3]" in out
    assert cli.main(["approve", "J1", "--reject", "not that file"]) == 0
    out = capsys.readouterr().out
    assert "call 3: rejected: not that file" in out and "every call is decided; the job goes on" in out
    assert parked.machine.record("J1")["state"] == "running"


def test_approve_everything_and_a_refused_decision(parked: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["approve", "J1", "--call", "9"]) == 2
    assert "no call 9 is waiting for a decision (waiting calls: 1, 3)" in capsys.readouterr().err
    assert cli.main(["approve", "J1", "--call", "1", "--args", '{"to": "x"}']) == 2
    assert "do not fit its schema" in capsys.readouterr().err
    assert cli.main(["approve", "J1"]) == 0
    assert "call 1: approved\ncall 3: approved\n" in capsys.readouterr().out
    assert cli.main(["approve", "J1"]) == 2
    assert "decided already" in capsys.readouterr().err
    assert cli.main(["approve", "nope"]) == 2
    assert "no job 'nope'" in capsys.readouterr().err


def test_a_decision_for_another_pause_is_one_line_and_exit_2(
    parked: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["approve", "J1", "--pause", "J1:2:tools:7"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("tandem: stale pause: job 'J1': that pause is not the current one")
        and err.count("\n") == 1
    )
    assert "decide on 'J1:2:tools:1' instead" in err
    assert parked.machine.record("J1")["state"] == "awaiting_approval"  # nothing changed
    assert cli.main(["approve", "J1", "--pause", "J1:2:tools:1", "--key", "k1"]) == 0
    assert "job J1, pause J1:2:tools:1:\ncall 1: approved\ncall 3: approved\n" in capsys.readouterr().out
    assert (
        cli.main(["approve", "J1", "--pause", "J1:2:tools:1", "--key", "k1"]) == 0
    )  # the same key: same answer


def test_a_decision_no_worker_applied_exits_3_in_one_line(
    parked: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tandem.client.handle import JobHandle
    from tandem.tasks.errors import DecisionTimeout

    def withdrawn(self: JobHandle, decisions: Any, **_: Any) -> list[Any]:
        raise DecisionTimeout("no worker applied the decision within 2 s, so it was withdrawn")

    monkeypatch.setattr(JobHandle, "decide", withdrawn)
    assert cli.main(["approve", "J1", "--timeout", "2"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("tandem: no worker applied the decision within 2 s") and err.count("\n") == 1
