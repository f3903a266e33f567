"""The worker's own checks of a spec (actions, tool policy, secrets) and its toolkit loading."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from tandem.broker_config import Settings
from tandem.broker_config.settings import Limits
from tandem.reasoner.errors import MemoryLimitError
from tandem.reasoner.loop.rounds import MonoPlan
from tandem.reasoner.loop.step import Step, StepInputs
from tandem.reasoner.memory import InMemoryReasonerMemory
from tandem.reasoner.task import Task
from tandem.reasoner.testing import ScriptedModelService
from tandem.tasks.errors import JobSpecError
from tandem.tasks.runtime import Runtime
from tandem.tasks.sealing import is_sealed
from tandem.tasks.spec import JobSpec
from tandem.toolkit import Action, Tool, ToolkitService
from tandem.toolkit.errors import ToolkitError


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def shell(command: str) -> str:
    """Run a shell command (never really)."""
    return command


def toolkit() -> object:
    service = ToolkitService()
    service.add_action(Action("compute", "compute", "Do arithmetic"), [], [])
    service.add_tool(Tool.from_function(add, description="A" * 5000), [("compute", 1.0)])
    service.add_tool(Tool.from_function(shell), [("compute", 1.0)])
    return service


LOADS: list[int] = []


def broken() -> object:
    LOADS.append(1)
    raise RuntimeError("mcp server 'files' failed to start: token=abcd1234")


def runtime(**env: str) -> Runtime:
    return Runtime(Settings.from_env({"TANDEM_TOOLKIT": "tests.tasks.test_runtime_checks:toolkit", **env}))


def test_unknown_actions_are_refused_naming_the_valid_ones() -> None:
    with pytest.raises(JobSpecError, match=r"unknown actions \['nope'\]; the toolkit's actions: compute"):
        runtime().check_spec(JobSpec(goal="g", actions=["nope"]))


def test_actions_without_a_toolkit_are_refused() -> None:
    with pytest.raises(JobSpecError, match="no toolkit"):
        Runtime(Settings.from_env({})).check_spec(JobSpec(goal="g", actions=["compute"]))


def test_an_unknown_tool_is_refused_not_silently_dropped() -> None:
    with pytest.raises(JobSpecError, match=r"unknown tools \['ad'\].*may name: add, shell"):
        runtime().check_spec(JobSpec(goal="g", tools=["ad"]))


def test_the_policy_bounds_what_a_job_gets() -> None:
    rt = runtime(TANDEM_TOOL_POLICY='{"allow": ["add"], "grant": ["shell"]}')
    assert [t.name for t in rt.task_for("j", JobSpec(goal="g")).recommend()[0]] == ["add"]
    granted = rt.task_for("j", JobSpec(goal="g", tools=["shell"])).recommend()[0]
    assert [t.name for t in granted] == ["shell"]
    denied = runtime(TANDEM_TOOL_POLICY='{"allow": ["add"]}')
    with pytest.raises(JobSpecError, match="not permitted"):
        denied.check_spec(JobSpec(goal="g", tools=["shell"]))


def test_secrets_are_sealed_for_storage_and_unsealed_for_the_tools() -> None:
    rt = runtime(TANDEM_SECRETS_KEY=Fernet.generate_key().decode())
    stored = rt.check_spec(JobSpec(goal="g", secrets={"tok": "runtime-secret-1"}))
    assert is_sealed(stored.secrets["tok"])
    task = rt.task_for("j", stored)
    assert task.secrets == {"tok": "runtime-secret-1"} and "runtime-secret-1" not in repr(task)


def test_secrets_without_a_key_are_refused() -> None:
    with pytest.raises(JobSpecError, match="TANDEM_SECRETS_KEY"):
        runtime().check_spec(JobSpec(goal="g", secrets={"tok": "x"}))


def test_tool_descriptions_are_capped_in_prompts() -> None:
    rt = runtime(TANDEM_MAX_TOOL_DESCRIPTION_CHARS="100")
    toolkit = rt.toolkit
    assert toolkit is not None
    (add_tool,) = [t for t in toolkit.tools() if t.name == "add"]
    assert len(add_tool.description) == 100 and add_tool.description.endswith("…")


def test_a_failed_toolkit_load_is_kept_not_retried() -> None:
    LOADS.clear()
    rt = Runtime(Settings.from_env({"TANDEM_TOOLKIT": "tests.tasks.test_runtime_checks:broken"}))
    for _ in range(3):
        with pytest.raises(ToolkitError, match="failed to start"):
            rt.load_toolkit()
    assert LOADS == [1]


def test_the_redis_client_has_timeouts_and_keepalive() -> None:
    rt = Runtime(Settings.from_env({"TANDEM_REDIS_SOCKET_TIMEOUT": "7", "TANDEM_REDIS_CONNECT_TIMEOUT": "3"}))
    kwargs = rt.redis.connection_pool.connection_kwargs
    assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"], kwargs["socket_keepalive"]) == (
        7,
        3,
        True,
    )


def test_the_celery_connections_have_timeouts_and_keepalive() -> None:
    from tandem.broker_config import celery_config

    conf = celery_config(Settings.from_env({"TANDEM_REDIS_SOCKET_TIMEOUT": "9"}))
    assert conf["broker_transport_options"]["socket_timeout"] == 9
    assert conf["broker_transport_options"]["socket_keepalive"] is True
    assert conf["redis_socket_timeout"] == 9 and conf["redis_socket_keepalive"] is True
    assert conf["result_extended"] is False  # task arguments (specs) are not copied to the backend


def test_settings_never_enter_app_conf() -> None:
    from tandem.tasks.app import create_app

    app = create_app(Settings.from_env({"TANDEM_ACTOR_API_KEY": "sk-conf-leak-test"}))
    assert "sk-conf-leak-test" not in repr(dict(app.conf))
    assert not any(isinstance(v, Settings) for v in app.conf.values())


def test_the_memory_limit_fails_the_step_and_keeps_the_memory() -> None:
    memory = InMemoryReasonerMemory()
    model = ScriptedModelService(["<action>more</action>"] * 5)
    task = Task(goal="g" * 50, max_memory_bytes=10_000)
    big = Task(goal="g", max_memory_bytes=10_000)
    MonoPlan().run_model(Step(0, "actor"), model, StepInputs(task, memory))
    padded = memory.get_messages()[0].model_copy(update={"content": "x" * 20_000, "round": 1})
    memory.add_message(padded)
    with pytest.raises(MemoryLimitError, match="TANDEM_MAX_MEMORY_BYTES"):
        MonoPlan().run_model(Step(2, "actor"), model, StepInputs(big, memory))
    assert len(memory.get_messages()) == 2


def test_limits_default_values_are_sane() -> None:
    limits = Limits()
    assert replace(limits) == limits and limits.tool_calls >= 1 and limits.spec_bytes >= 100_000


def test_a_toolkit_yaml_path_is_fine(tmp_path: Path) -> None:
    path = tmp_path / "tk.yaml"
    path.write_text("tools:\n  - function: tests.tasks.test_runtime_checks:add\npolicy:\n  allow: [add]\n")
    rt = Runtime(Settings.from_env({"TANDEM_TOOLKIT": str(path)}))
    assert rt.policy.allow == ("add",) and rt.known_tools() == ["add"]


def test_task_arguments_are_shown_without_secrets() -> None:
    from tandem.tasks.task_base import REPR_CHARS, shown

    text = shown(
        {
            "spec": {
                "goal": "g" * 50_000,
                "secrets": {"tok": "shown-secret-1"},
                "metadata": {"api_key": "k-99999"},
            }
        }
    )
    assert "shown-secret-1" not in text and "k-99999" not in text and len(text) <= REPR_CHARS


def _request(name: str, args: list[object], kwargs: dict[str, object]) -> object:
    """The worker-side request of a message sending task ``name`` these arguments."""
    from kombu import Message
    from kombu.utils.json import dumps

    from tandem.tasks.app import app
    from tandem.tasks.steps import intake, model  # noqa: F401  (registers the tasks)
    from tandem.tasks.task_base import RedactingRequest

    sent = app.amqp.as_task_v2("task-1", name, args=args, kwargs=kwargs)
    message = Message(
        body=dumps(sent.body),
        headers=sent.headers,
        content_type="application/json",
        content_encoding="utf-8",
        properties=sent.properties,
        delivery_info={"routing_key": "thinker", "exchange": ""},
    )
    return RedactingRequest(message, app=app, task=app.tasks[name])


def test_a_step_request_shows_its_arguments_with_known_secrets_masked() -> None:
    from tandem.toolkit.redaction import register_secret

    register_secret("step-arg-secret-77")
    step = _request("tandem.thinker_turn", ["step-arg-secret-77", 3], {})
    assert step.argsrepr == "['***', 3]" and step.kwargsrepr == "{}"  # type: ignore[attr-defined]
    intake = _request("tandem.infer", [], {"spec": {"goal": "g", "secrets": {"tok": "in-clear-5"}}})
    assert "in-clear-5" not in intake.kwargsrepr and "'tok': '***'" in intake.kwargsrepr  # type: ignore[attr-defined]
