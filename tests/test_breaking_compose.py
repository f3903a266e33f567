"""Breaking tests of the Dockerfile and docker-compose.yml, from docs/scaling.md (Docker),
docs/tracing.md (Docker Compose and Kubernetes) and the files' own comments, read as Docker reads
them (``tests/compose_file.py``); the processes are run in ``tests/integration/test_breaking_image.py``."""

from __future__ import annotations

import re
import tomllib

import pytest

from tandem.broker_config import Settings
from tandem.broker_config.trace_settings import TraceSettings
from tests.breaking_k8s import REPO, documented_variables
from tests.compose_file import ComposeError, compose_services, service_env

DOTENV = {
    "REDIS_PASSWORD": "long-random-redis-pass",
    "FLOWER_BASIC_AUTH": "ops:long-random-flower-pass",
    "TANDEM_API_TOKENS": "a-token-of-thirty-two-characters",
}
"""``.env`` with what scaling.md says it must set (and the API's tokens)."""
TANDEM_SERVICES = ("thinker", "actor", "tools", "flower", "api")


def dockerfile_install_extras() -> set[str]:
    """The extras of the Dockerfile's ``pip install '.[a,b]'``."""
    (extras,) = re.findall(r"pip install[^\n]*'\.\[([a-z0-9_,-]+)\]'", (REPO / "Dockerfile").read_text())
    return set(extras.split(","))


def test_the_dockerfile_installs_only_extras_the_project_declares() -> None:
    """The Dockerfile says it installs "the workers' stack and the OTLP exporter (`worker` and
    `otlp` extras)". pip only warns about an extra the project does not declare ("does not provide
    the extra") and installs without it, so a misnamed extra leaves the image without its stack."""
    declared = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    extras = dockerfile_install_extras()
    assert "otlp" in extras, f"the image does not install the OTLP exporter: {extras}"
    assert extras <= declared, (
        f"the Dockerfile installs extras pyproject.toml does not declare: {sorted(extras - declared)}"
    )


def test_the_dockerfile_copies_everything_the_package_is_built_from() -> None:
    text = (REPO / "Dockerfile").read_text()
    copied = {word for line in re.findall(r"^COPY (.+)$", text, flags=re.M) for word in line.split()[:-1]}
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    needed = {d.split("/")[0] for d in project["tool"]["setuptools"]["package-dir"].values()}
    needed |= {project["project"]["readme"], "pyproject.toml", "LICENSE"}
    assert needed <= copied, f"the image's build lacks {sorted(needed - copied)}"


@pytest.mark.parametrize("required", ["REDIS_PASSWORD", "FLOWER_BASIC_AUTH"])
@pytest.mark.parametrize("value", [None, ""])
def test_compose_refuses_to_start_without_the_required_settings(required: str, value: str | None) -> None:
    env = {k: v for k, v in DOTENV.items() if k != required}
    if value is not None:
        env[required] = value
    with pytest.raises(ComposeError, match=required):
        compose_services(env)


def test_the_services_are_what_scaling_md_says() -> None:
    services = compose_services(DOTENV)
    redis = services["redis"]
    assert "ports" not in redis, "Redis is published on the host"
    command = [str(w) for w in redis["command"]]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert command[command.index("--requirepass") + 1] == DOTENV["REDIS_PASSWORD"]
    for name in TANDEM_SERVICES:
        service = services[name]
        assert (service["image"], service["build"]) == ("tandem:latest", "."), name
        assert service["depends_on"]["redis"]["condition"] == "service_healthy", name
        env = service_env(service)
        for key in ("TANDEM_BROKER_URL", "TANDEM_RESULT_BACKEND", "TANDEM_REDIS_URL"):
            assert env[key] == f"redis://:{DOTENV['REDIS_PASSWORD']}@redis:6379/0", (name, key, env[key])
    for role in ("thinker", "actor", "tools"):  # `docker compose up --scale actor=4`
        assert "ports" not in services[role] and "container_name" not in services[role], (
            f"{role} cannot be scaled"
        )
        assert services[role]["command"][:3] == ["tandem", "worker", role], services[role]["command"]
    assert services["flower"]["ports"] == ["127.0.0.1:5555:5555"]
    assert service_env(services["flower"])["FLOWER_BASIC_AUTH"] == DOTENV["FLOWER_BASIC_AUTH"]
    assert not {"TANDEM_SECRETS_KEY", "TANDEM_THINKER_API_KEY", "TANDEM_ACTOR_API_KEY"} & set(
        service_env(services["flower"])
    )
    assert services["api"]["ports"] == ["127.0.0.1:8000:8000"]
    assert services["api"]["command"] == ["tandem", "api", "--host", "0.0.0.0", "--port", "8000"]
    assert service_env(services["api"])["TANDEM_API_TOKENS"] == DOTENV["TANDEM_API_TOKENS"]


def test_compose_passes_the_tracing_settings_and_each_service_names_itself() -> None:
    endpoint = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318",
        "OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=k",
    }
    on = compose_services({**DOTENV, **endpoint})
    off = compose_services(DOTENV)
    for name in ("thinker", "actor", "tools", "api"):
        env = service_env(on[name])
        assert {k: env.get(k) for k in endpoint} == endpoint, f"{name} does not get the collector's settings"
        assert env["OTEL_SERVICE_NAME"] == f"tandem-{name}"
        assert TraceSettings.from_env(env).enabled, f"{name} does not trace with the endpoint set"
        quiet = service_env(off[name])
        assert not TraceSettings.from_env(quiet).enabled, f"{name} traces with an empty endpoint: {quiet}"


def test_every_variable_compose_gives_tandem_is_documented_and_parses() -> None:
    names, families = documented_variables()
    services = compose_services(DOTENV)
    for name in TANDEM_SERVICES:
        env = service_env(services[name])
        unknown = sorted(k for k in env if k not in names and not k.startswith(families))
        assert not unknown, f"compose gives {name} {unknown}, which docs/configuration.md does not list"
        settings = Settings.from_env(env)  # every empty `${X:-}` must read as unset
        assert settings.thinker.is_demo and settings.actor.is_demo and settings.toolkit is None, name
