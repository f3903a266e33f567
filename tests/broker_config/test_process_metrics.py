"""Where a prefork worker's processes write their metric samples (``process_metrics.prepare``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tandem.broker_config import process_metrics


def test_threads_and_gevent_keep_samples_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(process_metrics.ENV, raising=False)
    for pool in ("threads", "gevent", "solo"):
        assert process_metrics.prepare(pool) is None
    assert process_metrics.ENV not in os.environ and not process_metrics.enabled()


def test_a_given_directory_is_used_and_an_earlier_runs_samples_removed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "counter_123.db").write_bytes(b"old")
    (tmp_path / "notes.txt").write_text("kept")
    monkeypatch.setenv(process_metrics.ENV, str(tmp_path / "sub"))
    assert process_metrics.prepare("prefork") == str(tmp_path / "sub") and (tmp_path / "sub").is_dir()
    monkeypatch.setenv(process_metrics.ENV, str(tmp_path))
    assert process_metrics.prepare("prefork") == str(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "sub"]


def test_a_fresh_directory_is_made_and_removed_when_the_worker_exits() -> None:
    code = (
        "import os; from tandem.broker_config import process_metrics as p; "
        "d = p.prepare('prefork'); print(d); assert os.environ[p.ENV] == d and os.path.isdir(d)"
    )
    env = {k: v for k, v in os.environ.items() if k != process_metrics.ENV}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    made = Path(done.stdout.strip())
    assert made.name.startswith("tandem-metrics-") and not made.exists()
