"""The README's runnable examples run, and its two commands are the ones CI uses."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README, re.S)


# Blocks that need a real model host or a running cluster are shown, not run here (the
# integration tests run the same calls against local stand-ins).
NEEDS_A_SERVER = ("gpu-1", "redis://redis", "submit(")


def test_the_in_process_quickstart_runs() -> None:
    block = next(b for b in _python_blocks() if "demo_model" in b)
    namespace: dict[str, object] = {}
    exec(compile(block, "README.md", "exec"), namespace)
    outcome = namespace["outcome"]
    assert outcome.status == "completed"  # type: ignore[attr-defined]


def test_every_self_contained_python_example_runs() -> None:
    runnable = [b for b in _python_blocks() if not any(marker in b for marker in NEEDS_A_SERVER)]
    assert len(runnable) >= 3
    for block in runnable:
        exec(compile(block, "README.md", "exec"), {})


def test_the_two_commands_exist_and_ci_runs_the_test_command() -> None:
    commands = re.findall(r"^make (\w+)", README, re.M)
    assert commands[:2] == ["demo", "test"]
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    assert "make --no-print-directory test" in (ROOT / ".ci" / "run").read_text()


def test_docker_compose_has_redis_with_aof_and_a_password_one_service_per_role_and_flower_with_auth() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert "--appendonly" in services["redis"]["command"]
    for role in ("thinker", "actor", "tools"):
        assert services[role]["command"][:3] == ["tandem", "worker", role]
        assert services[role]["image"] == services["flower"]["image"]
    flower = services["flower"]
    assert flower["environment"]["FLOWER_BASIC_AUTH"].startswith("${FLOWER_BASIC_AUTH:?")  # no default
    assert not any("--basic-auth" in part for part in flower["command"])  # never on the command line
    assert all(str(p).startswith("127.0.0.1:") for p in flower["ports"])
    assert not any("API_KEY" in k or "MODEL" in k or "SECRETS" in k for k in flower["environment"])
    assert "--requirepass" in services["redis"]["command"] and "ports" not in services["redis"]
    for role in ("thinker", "actor", "tools"):
        assert ":${REDIS_PASSWORD:?" in services[role]["environment"]["TANDEM_BROKER_URL"]
