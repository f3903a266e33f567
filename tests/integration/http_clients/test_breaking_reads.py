"""Breaking tests of ``tandem.Client`` and ``tandem.AsyncClient``, written from docs/api.md alone:
reads ride out a blip. Every read (``status``, ``job``, ``jobs``, ``events``, and ``result``, which
follows events) gets through a proxy's 502 and 503, a connection closed unanswered, an answer that
never comes and one cut short, and gives up after ``retry_for`` with what it last got.

The package's docstring says how they are built and run (``tests.integration.http_clients``).
"""

from __future__ import annotations

import pytest

from tandem.client import http
from tests.integration.http_clients.fault_proxy import FaultProxy, Rule
from tests.integration.http_clients.faults import READS, error_body, read_fault
from tests.integration.http_clients.world import ADD_TWICE, SILENCE, Side, World, free_port, spec

pytestmark = pytest.mark.integration


# -- reads through a blip --------------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["502", "503", "drop", "swallow", "truncate"])
@pytest.mark.parametrize("read", READS)
def test_a_read_rides_out_502_503_and_no_answer(
    proxy: FaultProxy, side: Side, ended_job: str, read: str, fault: str
) -> None:
    path, call = READS[read]
    times = 1 if (read, fault) == ("events", "swallow") else 3  # a silent stream: given up on at SILENCE
    rule = proxy.add(read_fault(fault, path.format(id=ended_job), times))
    got = call(side, side.client(proxy.url, timeout=2, retry_for=60, stream_silence=SILENCE), ended_job)
    assert got in ("completed", True, "final"), got
    assert [s.action for s in proxy.requests("GET", rule.path)] == [rule.action] * times + ["forward"]


def test_a_read_gives_up_after_retry_for(proxy: FaultProxy, side: Side, ended_job: str) -> None:
    path = f"/v1/jobs/{ended_job}"
    proxy.add(Rule("GET", path, "answer", -1, 503, error_body("redis_unavailable")))
    with pytest.raises(http.Unavailable) as raised:
        side.run(side.client(proxy.url, retry_for=2).status(ended_job))
    assert (raised.value.status, raised.value.code) == (503, "redis_unavailable")
    assert len(proxy.requests("GET", path)) >= 2, "a 503 was not asked again"
    nobody = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(http.ConnectionFailed):
        side.run(side.client(nobody, retry_for=1).status(ended_job))
    with pytest.raises(http.ConnectionFailed):
        side.run(side.client(nobody, retry_for=1).submit(goal="x"))


@pytest.mark.parametrize("fault", ["502", "503", "cut"])
def test_result_rides_out_what_its_reads_ride_out(
    world: World, proxy: FaultProxy, side: Side, fault: str
) -> None:
    """``result`` follows the job's events: a 502, a 503 or a cut on what it reads is ridden out."""
    api = side.client(proxy.url, retry_for=60)
    job = side.run(api.submit(spec("add twice", ADD_TWICE)))
    reads = f"/v1/jobs/{job.id}(/events)?"
    if fault == "cut":
        proxy.add(Rule("GET", reads, "cut", 2, events=1))
    else:
        proxy.add(Rule("GET", reads, "answer", 2, int(fault), b"<html>bad gateway</html>", "text/html"))
    outcome = side.run(job.result(timeout=180))
    assert (outcome.job_id, outcome.status) == (job.id, "completed")
    assert [s.action for s in proxy.requests("GET", reads)][:2] == ["cut" if fault == "cut" else "answer"] * 2
