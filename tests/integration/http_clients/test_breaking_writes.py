"""Breaking tests of ``tandem.Client`` and ``tandem.AsyncClient``, written from docs/api.md alone:
answers a proxy gives in front of the API (``fault_proxy``). Each documented status raises its
documented class; every write is sent once and raises what it got, whether the proxy answers 502
or 503, closes the connection unanswered, or swallows the answer of a write the API did.

The package's docstring says how they are built and run (``tests.integration.http_clients``).
"""

from __future__ import annotations

import httpx
import pytest

from tests.integration.http_clients.fault_proxy import FaultProxy, Rule
from tests.integration.http_clients.faults import (
    ANSWERS,
    FAULTS,
    WRITES,
    once_goal,
    write_fault,
)
from tests.integration.http_clients.world import ADD, FULL, Side, World, spec

pytestmark = pytest.mark.integration


# -- errors a proxy answers: each documented class, each write sent once ---------------------------


@pytest.mark.parametrize(
    ("answer", "call"), [(a, c) for a in ANSWERS for c in ("write", "read") if (a, c) != ("503", "read")]
)
def test_an_answer_raises_its_documented_class_and_a_write_is_sent_once(
    proxy: FaultProxy, side: Side, ended_job: str, answer: str, call: str
) -> None:
    """A write (``submit``) raises the class of what it got, sent once; so does a read
    (``status``) given an answer it does not ride out (a 503 it does: its own test)."""
    got = ANSWERS[answer]
    method, path = ("POST", "/v1/jobs") if call == "write" else ("GET", f"/v1/jobs/{ended_job}")
    proxy.add(Rule(method, path, "answer", -1, got.status, got.body, got.content_type, got.headers))
    api = side.client(proxy.url, retry_for=3)
    with pytest.raises(got.kind) as raised:
        side.run(api.submit(spec("refused", ADD)) if call == "write" else api.status(ended_job))
    assert (raised.value.status, raised.value.retry_after) == (got.status, got.retry_after), raised.value
    if call == "write":
        assert len(proxy.requests(method, path)) == 1


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("write", WRITES)
def test_a_write_that_gets_no_good_answer_is_not_sent_again(
    world: World, proxy: FaultProxy, side: Side, ended_job: str, write: str, fault: str
) -> None:
    """Each write raises what it got (``FAULTS``), and the proxy saw it once."""
    path, call = WRITES[write]
    proxy.add(write_fault(fault, path))
    api = side.client(proxy.url, timeout=2, retry_for=30)
    with pytest.raises(FAULTS[fault]):
        side.run(call(api, ended_job))
    assert [s.method for s in proxy.requests("POST", path)] == ["POST"], proxy.seen
    if write == "submit" and fault == "swallow":  # the API made the job: exactly one, not two
        listed = httpx.get(f"{world.api.url}/v1/jobs?limit=200", headers={"Authorization": f"Bearer {FULL}"})
        goals = [j.get("goal", "") for j in listed.json()["jobs"]]
        assert sum(g.startswith(once_goal(api)) for g in goals) == 1, goals
