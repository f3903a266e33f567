"""``Settings.from_env`` (every ``TANDEM_*`` variable, checked) and the Celery configuration."""

from __future__ import annotations

import importlib
import os
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from tandem.broker_config import ROLE_QUEUES, TASK_QUEUES, RoleSettings, Settings, celery_config
from tandem.broker_config.errors import SettingsError
from tandem.broker_config.settings import DEFAULT_URL
from tandem.broker_config.transport import TRANSPORT
from tandem.reasoner.parsing import REASONING_PARSERS

# -- defaults -------------------------------------------------------------------------------------


def test_defaults_with_an_empty_environment() -> None:
    settings = Settings.from_env({})
    assert settings == Settings()
    assert (settings.broker_url, settings.result_backend, settings.redis_url) == (DEFAULT_URL,) * 3
    assert settings.toolkit is None and settings.intake_queue == "celery" and settings.prefix == "tandem"
    assert (settings.task_time_limit, settings.lease_seconds, settings.tool_timeout) == (900.0, 30.0, 60.0)
    assert (settings.result_expires, settings.memory_ttl, settings.max_output_chars) == (86400, 86400, 8000)
    for role in ("thinker", "actor"):
        role_settings = settings.role(role)
        assert role_settings == RoleSettings(role)
        assert role_settings.is_demo and role_settings.timeout == 120.0


def test_blank_values_count_as_unset() -> None:
    env = {
        "TANDEM_BROKER_URL": "  ",
        "TANDEM_LEASE_SECONDS": "",
        "TANDEM_ACTOR_MODEL": " ",
        "TANDEM_PREFIX": "",
    }
    assert Settings.from_env(env) == Settings()


def test_every_value_is_read() -> None:
    env = {
        "TANDEM_BROKER_URL": "redis://broker:6379/1",
        "TANDEM_RESULT_BACKEND": "redis://backend:6379/2",
        "TANDEM_REDIS_URL": "rediss://state:6380/3",
        "TANDEM_TOOLKIT": "mypkg.tools:toolkit",
        "TANDEM_INTAKE_QUEUE": "intake",
        "TANDEM_TASK_TIME_LIMIT": "120",
        "TANDEM_LEASE_SECONDS": "5.5",
        "TANDEM_RESULT_EXPIRES": "3600",
        "TANDEM_MEMORY_TTL": "7200",
        "TANDEM_TOOL_TIMEOUT": "2.5",
        "TANDEM_MAX_OUTPUT_CHARS": "500",
        "TANDEM_PREFIX": "team-a",
    }
    settings = Settings.from_env(env)
    assert settings.broker_url == "redis://broker:6379/1"
    assert settings.result_backend == "redis://backend:6379/2"
    assert settings.redis_url == "rediss://state:6380/3"
    assert settings.toolkit == "mypkg.tools:toolkit"
    assert settings.intake_queue == "intake"
    assert (settings.task_time_limit, settings.lease_seconds, settings.tool_timeout) == (120.0, 5.5, 2.5)
    assert (settings.result_expires, settings.memory_ttl, settings.max_output_chars) == (3600, 7200, 500)
    assert settings.prefix == "team-a"


def test_the_redis_url_and_backend_follow_a_redis_broker() -> None:
    settings = Settings.from_env({"TANDEM_BROKER_URL": "redis://broker:6379/4"})
    assert settings.redis_url == settings.result_backend == "redis://broker:6379/4"
    amqp = Settings.from_env({"TANDEM_BROKER_URL": "amqp://guest@rabbit//"})
    assert amqp.redis_url == amqp.result_backend == DEFAULT_URL  # Redis is still needed for state


def test_with_urls_points_everything_at_one_redis() -> None:
    moved = Settings.from_env({"TANDEM_PREFIX": "p"}).with_urls("redis://127.0.0.1:7777/0")
    assert (moved.broker_url, moved.result_backend, moved.redis_url) == ("redis://127.0.0.1:7777/0",) * 3
    assert moved.prefix == "p"


def test_the_process_environment_is_read_when_none_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TANDEM_PREFIX", "from-os-environ")
    assert Settings.from_env().prefix == "from-os-environ"


# -- bad values name the variable and the value ---------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        pytest.param("TANDEM_BROKER_URL", "http://broker:6379", id="broker-scheme"),
        pytest.param("TANDEM_BROKER_URL", "localhost:6379", id="broker-no-scheme"),
        pytest.param("TANDEM_RESULT_BACKEND", "amqp://rabbit//", id="backend-scheme"),
        pytest.param("TANDEM_REDIS_URL", "postgres://db", id="redis-scheme"),
        pytest.param("TANDEM_TASK_TIME_LIMIT", "fifteen", id="time-limit-text"),
        pytest.param("TANDEM_TASK_TIME_LIMIT", "5", id="time-limit-low"),
        pytest.param("TANDEM_TASK_TIME_LIMIT", "inf", id="time-limit-inf"),
        pytest.param("TANDEM_LEASE_SECONDS", "0.5", id="lease-low"),
        pytest.param("TANDEM_LEASE_SECONDS", "nan", id="lease-nan"),
        pytest.param("TANDEM_LEASE_SECONDS", "30s", id="lease-unit"),
        pytest.param("TANDEM_RESULT_EXPIRES", "1.5", id="expires-fraction"),
        pytest.param("TANDEM_RESULT_EXPIRES", "10", id="expires-low"),
        pytest.param("TANDEM_MEMORY_TTL", "day", id="ttl-text"),
        pytest.param("TANDEM_MEMORY_TTL", "-1", id="ttl-negative"),
        pytest.param("TANDEM_TOOL_TIMEOUT", "0", id="tool-timeout-zero"),
        pytest.param("TANDEM_TOOL_TIMEOUT", "inf", id="tool-timeout-inf"),
        pytest.param("TANDEM_MAX_OUTPUT_CHARS", "50", id="output-low"),
        pytest.param("TANDEM_MAX_OUTPUT_CHARS", "8k", id="output-text"),
        pytest.param("TANDEM_THINKER_TEMPERATURE", "hot", id="temperature-text"),
        pytest.param("TANDEM_ACTOR_TEMPERATURE", "2.50", id="temperature-high"),
        pytest.param("TANDEM_ACTOR_TEMPERATURE", "-0.1", id="temperature-negative"),
        pytest.param("TANDEM_ACTOR_TEMPERATURE", "nan", id="temperature-nan"),
        pytest.param("TANDEM_THINKER_MAX_TOKENS", "-1", id="max-tokens-negative"),
        pytest.param("TANDEM_ACTOR_MAX_TOKENS", "lots", id="max-tokens-text"),
        pytest.param("TANDEM_THINKER_TIMEOUT", "0.5", id="model-timeout-low"),
        pytest.param("TANDEM_ACTOR_TIMEOUT", "-inf", id="model-timeout-inf"),
        pytest.param("TANDEM_ACTOR_API_BASE", "gpu-1:8000/v1", id="api-base-no-scheme"),
        pytest.param("TANDEM_THINKER_API_BASE", "ftp://gpu-1/v1", id="api-base-scheme"),
        pytest.param("TANDEM_THINKER_REASONING_PARSER", "deepseek", id="unknown-parser"),
        pytest.param("TANDEM_INTAKE_QUEUE", "tools", id="intake-clash"),
        pytest.param("TANDEM_ACTOR_THINKING", "maybe", id="thinking-not-a-flag"),
    ],
)
def test_a_bad_value_names_the_variable_and_the_value(name: str, value: str) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({name: value})
    assert f"{name}={value!r}" in str(caught.value)


@pytest.mark.parametrize("queue", ROLE_QUEUES)
def test_the_intake_queue_may_not_be_a_role_queue(queue: str) -> None:
    with pytest.raises(SettingsError, match="clashes with a role queue"):
        Settings.from_env({"TANDEM_INTAKE_QUEUE": queue})


def test_an_unknown_parser_lists_the_known_ones() -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"TANDEM_ACTOR_REASONING_PARSER": "qwen"})
    assert all(name in str(caught.value) for name in REASONING_PARSERS)


def test_a_text_where_a_whole_number_goes_suggests_a_valid_one() -> None:
    with pytest.raises(SettingsError, match=r"set it to e\.g\. 4096\b"):
        Settings.from_env({"TANDEM_ACTOR_MAX_TOKENS": "lots"})


@pytest.mark.parametrize(
    "url",
    ["redis://h:1/0", "rediss://h:1/0", "redis+socket:///tmp/r.sock", "amqp://h//", "pyamqp://h//"],
)
def test_every_supported_broker_scheme(url: str) -> None:
    assert Settings.from_env({"TANDEM_BROKER_URL": url}).broker_url == url


def test_a_unix_socket_broker_gives_socket_defaults_in_each_clients_spelling() -> None:
    settings = Settings.from_env({"TANDEM_BROKER_URL": "redis+socket:///tmp/r.sock"})
    assert settings.redis_url == "unix:///tmp/r.sock"  # redis-py's spelling
    assert settings.result_backend == "redis+socket:///tmp/r.sock"  # Celery's spelling


def test_a_unix_socket_redis_url_gives_a_socket_backend() -> None:
    settings = Settings.from_env({"TANDEM_REDIS_URL": "unix:///tmp/r.sock"})
    assert settings.redis_url == "unix:///tmp/r.sock"
    assert settings.result_backend == "redis+socket:///tmp/r.sock"
    assert settings.broker_url == DEFAULT_URL


# -- per role ----------------------------------------------------------------------------------------


def test_each_role_reads_its_own_variables() -> None:
    env = {
        "TANDEM_THINKER_MODEL": "hosted_vllm/Qwen3-32B",
        "TANDEM_THINKER_API_BASE": "http://gpu-1:8000/v1",
        "TANDEM_THINKER_API_KEY": "thinker-key",
        "TANDEM_THINKER_REASONING_PARSER": "qwen3",
        "TANDEM_THINKER_TEMPERATURE": "0.6",
        "TANDEM_THINKER_MAX_TOKENS": "4096",
        "TANDEM_THINKER_TIMEOUT": "300",
        "TANDEM_ACTOR_MODEL": "openai/gpt-4o-mini",
        "TANDEM_ACTOR_TEMPERATURE": "0",
    }
    settings = Settings.from_env(env)
    assert settings.thinker == RoleSettings(
        role="thinker",
        model="hosted_vllm/Qwen3-32B",
        api_base="http://gpu-1:8000/v1",
        api_key="thinker-key",
        reasoning_parser="qwen3",
        temperature=0.6,
        max_tokens=4096,
        timeout=300.0,
    )
    assert settings.actor == RoleSettings(role="actor", model="openai/gpt-4o-mini", temperature=0.0)
    assert not settings.thinker.is_demo and not settings.actor.is_demo


@pytest.mark.parametrize(
    ("value", "thinking"),
    [("true", True), ("1", True), ("ON", True), ("false", False), ("no", False), ("", None)],
)
def test_thinking_is_a_per_role_flag(value: str, thinking: bool | None) -> None:
    settings = Settings.from_env({"TANDEM_THINKER_THINKING": value})
    assert settings.thinker.thinking is thinking
    assert settings.actor.thinking is None


def test_one_role_configured_leaves_the_other_on_the_demo_model() -> None:
    settings = Settings.from_env({"TANDEM_ACTOR_MODEL": "openai/gpt-4o-mini"})
    assert settings.thinker.is_demo and not settings.actor.is_demo


def test_the_api_key_is_not_shown_in_repr() -> None:
    role = RoleSettings.from_env("actor", {"TANDEM_ACTOR_API_KEY": "sk-secret"})
    assert role.api_key == "sk-secret" and "sk-secret" not in repr(role)


@pytest.mark.parametrize("role", ["THINKER", "ACTOR"])
def test_a_model_url_with_credentials_and_an_api_key_too_is_refused_naming_both(role: str) -> None:
    base = "https://ops:s3cret-pw@gpu-1:8000/v1"
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({f"TANDEM_{role}_API_BASE": base, f"TANDEM_{role}_API_KEY": "sk-1"})
    assert str(refused.value) == (
        f"TANDEM_{role}_API_BASE='https://ops:***@gpu-1:8000/v1' holds a user and password, and "
        f"TANDEM_{role}_API_KEY is set too: a request has one Authorization header (HTTP Basic for the "
        f"URL's credentials, Bearer for the key); keep one, TANDEM_{role}_API_KEY or the URL's "
        "user:password (docs/model-hosts.md)"
    )
    alone = Settings.from_env({f"TANDEM_{role}_API_BASE": base}).role(role.lower())
    assert (alone.api_base, alone.api_key) == (base, None)  # the URL's credentials alone: HTTP Basic


def test_a_worker_with_both_credentials_stops_at_start_with_that_one_line() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TANDEM_")}
    env |= {"TANDEM_ACTOR_API_BASE": "http://u:pw-9@127.0.0.1:9/v1", "TANDEM_ACTOR_API_KEY": "sk-1"}
    done = subprocess.run(
        [sys.executable, "-m", "tandem.workers.cli", "worker", "actor"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("tandem: TANDEM_ACTOR_API_BASE='http://u:***@127.0.0.1:9/v1' holds a user and ")
    assert "pw-9" not in line


def test_an_unknown_role_is_refused() -> None:
    with pytest.raises(SettingsError, match="unknown role 'tools'"):
        Settings().role("tools")


@pytest.mark.parametrize("parser", REASONING_PARSERS)
def test_every_known_parser_is_accepted(parser: str) -> None:
    assert Settings.from_env({"TANDEM_ACTOR_REASONING_PARSER": parser}).actor.reasoning_parser == parser


# -- Celery configuration ---------------------------------------------------------------------------


def test_only_json_crosses_the_wire() -> None:
    config = celery_config(Settings())
    assert config["task_serializer"] == config["result_serializer"] == config["event_serializer"] == "json"
    assert config["accept_content"] == config["result_accept_content"] == ["json"]


def test_steps_are_acknowledged_late_one_at_a_time() -> None:
    config = celery_config(Settings())
    assert config["task_acks_late"] is True
    assert config["task_reject_on_worker_lost"] is True
    assert config["worker_prefetch_multiplier"] == 1


def test_every_task_has_a_route() -> None:
    from tandem.tasks.app import app  # builds the app from the environment; no worker, no connection

    for module in app.conf.imports:  # what a worker imports
        importlib.import_module(module)
    assert "tandem.tasks.steps.model" in app.conf.imports
    config = celery_config(Settings(intake_queue="jobs"))
    routes = config["task_routes"]
    registered = {name for name in app.tasks if name.startswith("tandem.")}
    assert registered, "no tandem task is registered"
    assert registered <= set(routes)
    assert routes["tandem.infer"] == {"queue": "jobs"}
    assert routes["tandem.thinker_turn"] == {"queue": "thinker"}
    assert routes["tandem.actor_turn"] == {"queue": "actor"}
    assert routes["tandem.run_tool"] == {"queue": "tools"}
    for name, queue in TASK_QUEUES.items():
        assert routes[name] == {"queue": queue}
        assert queue in ROLE_QUEUES


def test_the_queues_are_the_intake_and_the_roles() -> None:
    config = celery_config(Settings(intake_queue="jobs"))
    assert [q.name for q in config["task_queues"]] == ["jobs", "thinker", "actor", "tools"]
    assert config["task_default_queue"] == "jobs"


@pytest.mark.parametrize(
    "env",
    [
        pytest.param({}, id="defaults"),
        pytest.param({"TANDEM_TASK_TIME_LIMIT": "3600", "TANDEM_LEASE_SECONDS": "1"}, id="long-steps"),
        pytest.param({"TANDEM_TASK_TIME_LIMIT": "10"}, id="shortest-limit"),
    ],
)
def test_the_visibility_timeout_exceeds_the_task_time_limit(env: dict[str, str]) -> None:
    settings = Settings.from_env(env)
    config = celery_config(settings)
    assert config["task_time_limit"] == settings.task_time_limit
    assert 0 < config["task_soft_time_limit"] < config["task_time_limit"]
    assert config["broker_transport_options"]["visibility_timeout"] > settings.task_time_limit
    assert config["result_backend_transport_options"]["visibility_timeout"] > settings.task_time_limit


def test_the_urls_and_expiry_come_from_the_settings() -> None:
    settings = Settings.from_env({"TANDEM_BROKER_URL": "redis://b:1/0", "TANDEM_RESULT_EXPIRES": "600"})
    config = celery_config(settings)
    assert (config["broker_url"], config["result_backend"], config["result_expires"]) == (
        "redis://b:1/0",
        "redis://b:1/0",
        600,
    )
    assert config["worker_send_task_events"] is False and config["task_send_sent_event"] is False


def test_task_events_are_off_unless_asked_for() -> None:
    """Each task event is a PUBLISH: workers send none until Flower (or TANDEM_TASK_EVENTS) asks."""
    on = celery_config(Settings.from_env({"TANDEM_TASK_EVENTS": "1"}))
    assert on["worker_send_task_events"] is True and on["task_send_sent_event"] is True
    assert Settings.from_env({}).task_events is False


def test_step_tasks_store_no_result() -> None:
    """A job's result is stored under the job id; the steps' own results are never written."""
    annotations = celery_config(Settings())["task_annotations"]
    assert annotations["tandem.thinker_turn"] == {"ignore_result": True}
    assert annotations["tandem.run_tool"] == {"ignore_result": True}
    assert "tandem.infer" not in annotations and "tandem.decide" not in annotations


def test_function_calling_mode_of_a_role() -> None:
    from tandem.broker_config import Settings

    assert Settings.from_env({}).actor.function_calling is None
    assert Settings.from_env({"TANDEM_ACTOR_FUNCTION_CALLING": "prompt"}).actor.function_calling == "prompt"
    with pytest.raises(SettingsError, match="TANDEM_ACTOR_FUNCTION_CALLING='xml'"):
        Settings.from_env({"TANDEM_ACTOR_FUNCTION_CALLING": "xml"})


def test_tool_choice_of_a_role() -> None:
    assert Settings.from_env({}).actor.tool_choice == "auto"
    settings = Settings.from_env(
        {"TANDEM_ACTOR_TOOL_CHOICE": "omit", "TANDEM_THINKER_TOOL_CHOICE": "required"}
    )
    assert (settings.actor.tool_choice, settings.thinker.tool_choice) == ("omit", "required")
    with pytest.raises(SettingsError, match=r"TANDEM_ACTOR_TOOL_CHOICE='any' must be one of auto, required"):
        Settings.from_env({"TANDEM_ACTOR_TOOL_CHOICE": "any"})


def test_each_role_caps_its_replies_by_default() -> None:
    settings = Settings.from_env({})
    assert (settings.thinker.reply_tokens, settings.actor.reply_tokens) == (8192, 4096)
    assert Settings.from_env({"TANDEM_ACTOR_MAX_TOKENS": "0"}).actor.reply_tokens is None  # no cap
    assert Settings.from_env({"TANDEM_ACTOR_MAX_TOKENS": "512"}).actor.reply_tokens == 512


def test_flower_credentials_come_from_the_environment_or_a_file(tmp_path: Path) -> None:
    from tandem.broker_config.settings import flower_basic_auth

    assert flower_basic_auth({}) is None
    assert flower_basic_auth({"FLOWER_BASIC_AUTH": "ops:long-enough"}) == "ops:long-enough"
    creds = tmp_path / "auth"
    creds.write_text("a:first-pass1,b:second-pass2\n")
    assert flower_basic_auth({"FLOWER_BASIC_AUTH_FILE": str(creds)}) == "a:first-pass1,b:second-pass2"
    with pytest.raises(SettingsError, match="at least 8"):
        flower_basic_auth({"FLOWER_BASIC_AUTH": "ops:short"})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("TANDEM_SECRETS_KEY", "not-a-key"),
        ("TANDEM_MAX_SPEC_BYTES", "10"),
        ("TANDEM_MAX_TOOL_CALLS", "0"),
        ("TANDEM_REDIS_SOCKET_TIMEOUT", "0.1"),
        ("TANDEM_SIGNING_KEY", "/nonexistent.pem"),
    ],
)
def test_a_bad_security_setting_names_the_variable(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        Settings.from_env({name: value})


# -- capacity, pool, metrics and priority ----------------------------------------------------------


def test_capacity_limits_per_role() -> None:
    settings = Settings.from_env(
        {
            "TANDEM_ACTOR_MODEL": "openai/m",
            "TANDEM_ACTOR_API_BASE": "http://gpu-1:8000/v1/",
            "TANDEM_ACTOR_MAX_IN_FLIGHT": "16",
            "TANDEM_ACTOR_RPM": "600",
            "TANDEM_ACTOR_TPM": "200000",
        }
    )
    assert (settings.actor.max_in_flight, settings.actor.rpm, settings.actor.tpm) == (16, 600, 200000)
    assert settings.actor.limited and not settings.thinker.limited
    assert settings.host_limits("actor") == ("http://gpu-1:8000/v1", 16, 600, 200000)
    assert settings.host_limits("thinker") == ("demo", None, None, None)


def test_roles_sharing_a_host_share_the_smallest_limits() -> None:
    base = "http://gpu-1:8000/v1"
    settings = Settings.from_env(
        {
            "TANDEM_THINKER_API_BASE": base,
            "TANDEM_ACTOR_API_BASE": base,
            "TANDEM_THINKER_MAX_IN_FLIGHT": "8",
            "TANDEM_ACTOR_MAX_IN_FLIGHT": "16",
            "TANDEM_ACTOR_TPM": "1000",
        }
    )
    assert settings.host_limits("thinker") == settings.host_limits("actor") == (base, 8, None, 1000)


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        pytest.param("TANDEM_ACTOR_MAX_IN_FLIGHT", "0", "must be at least 1", id="zero-slots"),
        pytest.param("TANDEM_THINKER_RPM", "lots", "is not a whole number", id="words"),
        pytest.param("TANDEM_ACTOR_TPM", "1.5", "is not a whole number", id="fraction"),
        pytest.param("TANDEM_REDIS_MAX_CONNECTIONS", "-3", "must be at least 1", id="negative-pool"),
        pytest.param("TANDEM_REDIS_POOL_TIMEOUT", "0", "must be at least 0.1", id="no-wait"),
        pytest.param("TANDEM_METRICS_PORT", "70000", "is not a TCP port", id="port-range"),
    ],
)
def test_bad_capacity_and_pool_values_are_refused(name: str, value: str, says: str) -> None:
    with pytest.raises(SettingsError, match=says) as caught:
        Settings.from_env({name: value})
    assert f"{name}={value!r}" in str(caught.value)


def test_pool_and_metrics_settings() -> None:
    settings = Settings.from_env(
        {
            "TANDEM_REDIS_MAX_CONNECTIONS": "300",
            "TANDEM_REDIS_POOL_TIMEOUT": "5",
            "TANDEM_METRICS_PORT": "9808",
        }
    )
    assert (settings.redis_max_connections, settings.redis_pool_timeout, settings.metrics_port) == (
        300,
        5.0,
        9808,
    )
    assert Settings.from_env({}).metrics_port is None


def test_queues_honour_priority_on_redis_and_rabbitmq() -> None:
    redis_conf = celery_config(Settings())
    assert redis_conf["task_inherit_parent_priority"] is True
    assert redis_conf["broker_transport_options"]["priority_steps"] == list(range(10))
    assert redis_conf["broker_transport_options"]["queue_order_strategy"] == "priority"
    amqp_conf = celery_config(Settings.from_env({"TANDEM_BROKER_URL": "amqp://guest@localhost//"}))
    intake, *steps = amqp_conf["task_queues"]
    assert [q.name for q in steps] == ["thinker", "actor", "tools"]
    assert all(q.queue_arguments == {"x-max-priority": 9} for q in steps)
    # A plain Celery client declares the intake queue with no arguments: the workers must too.
    assert (intake.name, intake.queue_arguments) == ("celery", None)
    assert "priority_steps" not in amqp_conf["broker_transport_options"]


def test_step_queues_skip_kombus_ack_emulation_by_default() -> None:
    conf = celery_config(Settings())
    assert conf["broker_transport"] == TRANSPORT
    assert conf["broker_transport_options"]["resent_queues"] == ["thinker", "actor", "tools"]
    assert "ack_emulation" not in conf["broker_transport_options"]
    assert conf["broker_transport_options"]["dead_letter_key"] == "tandem:dead-letters"
    # kombu's ack emulation for every queue, or none: still tandem's channel (it survives outages)
    every = celery_config(Settings.from_env({"TANDEM_BROKER_ACK_EMULATION": "1"}))
    assert every["broker_transport"] == TRANSPORT and "resent_queues" not in every["broker_transport_options"]
    off = celery_config(Settings.from_env({"TANDEM_BROKER_ACK_EMULATION": "0"}))
    assert off["broker_transport_options"]["ack_emulation"] is False and off["broker_transport"] == TRANSPORT
    # TLS: naming the transport skips what kombu's ``rediss`` scheme sets, so it is set here
    tls = celery_config(Settings.from_env({"TANDEM_BROKER_URL": "rediss://localhost:6380/0"}))
    assert tls["broker_transport"] == TRANSPORT and tls["broker_use_ssl"] == {"ssl_cert_reqs": ssl.CERT_NONE}
    # kombu's own transport where ours does not apply: RabbitMQ
    amqp = celery_config(Settings.from_env({"TANDEM_BROKER_URL": "amqp://guest@localhost//"}))
    assert "broker_transport" not in amqp


def test_workers_retry_the_broker_for_ever() -> None:
    assert celery_config(Settings())["broker_connection_max_retries"] is None
