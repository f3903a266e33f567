"""``tandem run --webhook URL``: the URLs go into the spec, and a host outside the allow-list is a
usage error (exit 2) before anything is sent."""

from __future__ import annotations

from typing import Any

import pytest

from tandem.workers import cli


def test_each_webhook_option_is_a_webhook_of_the_spec() -> None:
    args = cli._parser().parse_args(
        ["run", "g", "--webhook", "http://127.0.0.1:9000/a", "--webhook", "http://localhost/b"]
    )
    assert cli._spec(args, args.goal)["webhooks"] == [
        {"url": "http://127.0.0.1:9000/a"},
        {"url": "http://localhost/b"},
    ]
    assert "webhooks" not in cli._spec(cli._parser().parse_args(["run", "g"]), "g")


def test_a_webhook_host_outside_the_allow_list_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tandem.client import submission as tasks_client

    def default_app() -> Any:
        raise AssertionError("a refused spec must not reach the Celery app")

    monkeypatch.setattr(tasks_client, "_default_app", default_app)
    assert cli.main(["run", "g", "--webhook", "https://hooks.example.com/h"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tandem: field 'webhooks.0.url': host 'hooks.example.com' is not allowed")
