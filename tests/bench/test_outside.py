"""``python -m bench.outside`` at a tiny scale: a private redis-server, the two stub hosts and one
real ``tandem worker`` per role; every job completes in exactly two rounds and every figure is
positive and consistent with the script (two requests per job on each host, one tool result read
by each job's Thinker).

Skips when ``redis-server`` is not installed, except in CI (``CI=true``), where that is a failure.
"""

from __future__ import annotations

import os
import shutil

import pytest

from bench import outside

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _needs_redis_server() -> None:
    if shutil.which("redis-server") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("bench.outside needs redis-server on PATH in CI")
        pytest.skip("redis-server is not installed")


@pytest.mark.timeout(180)
def test_a_tiny_burst_completes_every_job_and_reports_sane_figures(
    capsys: pytest.CaptureFixture[str],
) -> None:
    jobs = 6
    assert outside.main(["--jobs", str(jobs), "--latency", "0.2", "--concurrency", "4"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("outside_")]
    figures = dict(line.removeprefix("outside_").split(": ", 1) for line in lines)

    assert int(figures["completed"]) == jobs
    assert figures["rounds_per_job_seen"] == "2..2"
    assert int(figures["thinker_requests"]) == 2 * jobs
    assert int(figures["actor_requests"]) == 2 * jobs
    assert int(figures["tool_results_read_by_thinker"]) == jobs
    assert float(figures["thinker_requests_per_round"]) == 1.0
    assert float(figures["bound_jobs_per_s"]) == pytest.approx(4 / (0.2 * 2))
    assert 0 < float(figures["ratio_to_bound"]) <= 1.0
    # Four calls of 0.2 s in a row: no job can end sooner; none should take a minute.
    assert 0.8 <= float(figures["job_latency_p50_s"]) <= float(figures["job_latency_p99_s"]) < 60
    assert (
        0 <= float(figures["first_thinker_delay_p50_s"]) <= float(figures["first_thinker_delay_p99_s"]) < 30
    )
    for name in ("cpu_ms_per_round_workers", "redis_cpu_ms_per_round", "redis_commands_per_round"):
        assert float(figures[name]) > 0, name
    for role in outside.ROLES:
        assert float(figures[f"cpu_ms_per_round_{role}"]) >= 0
