"""The worker's Prometheus endpoint and the tool-call timing."""

from __future__ import annotations

import fakeredis
import httpx

from tandem.reasoner.function_calling import ParsedFunctionCall
from tandem.tasks.hosts.capacity import Grant, HostCapacity, HostLimits, snapshot
from tandem.tasks.metrics import MODEL_TOKENS, MeteredToolRunner, serve
from tandem.toolkit.tool import Tool


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def test_metrics_are_served_with_the_documented_names() -> None:
    redis = fakeredis.FakeRedis()
    cap = HostCapacity(redis, "t", HostLimits("http://h/v1", 4))
    assert isinstance(cap.acquire(1), Grant) and isinstance(cap.acquire(1), Grant)
    cap.wait_for_slot("j:0:actor", {"name": "x"})  # a slot is free: not counted as waiting
    MODEL_TOKENS.labels("actor", "http://h/v1", "prompt").inc(7)
    port = serve(0, lambda: [snapshot(redis, "t", cap.limits)])
    body = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    assert 'tandem_model_tokens_total{host="http://h/v1",kind="prompt",role="actor"} 7.0' in body
    assert 'tandem_host_in_flight{host="http://h/v1"} 2.0' in body
    assert 'tandem_host_waiting_steps{host="http://h/v1"} 0.0' in body
    for name in (
        "tandem_model_call_seconds",
        "tandem_model_cost_usd_total",
        "tandem_model_calls_in_flight",
        "tandem_model_rate_limited_total",
        "tandem_host_backoff_seconds_total",
        "tandem_capacity_waits_total",
        "tandem_steps_running",
        "tandem_step_outcomes_total",
        "tandem_tool_call_seconds",
    ):
        assert f"# TYPE {name}" in body, name


def test_tool_calls_are_timed_by_tool_and_status() -> None:
    tool = Tool.from_function(add)
    runner = MeteredToolRunner()
    ok = ParsedFunctionCall(name="add", call_objective="", args={"a": 1, "b": 2}, raw="")
    bad = ParsedFunctionCall(name="nope", call_objective="", args={}, raw="")
    assert runner.run_call({"add": tool}, ok, 1).output == "3"
    runner.run_call({"add": tool}, bad, 2)
    from prometheus_client import REGISTRY

    assert REGISTRY.get_sample_value("tandem_tool_call_seconds_count", {"tool": "add", "status": "succeeded"})
    assert REGISTRY.get_sample_value(
        "tandem_tool_call_seconds_count", {"tool": "(unknown)", "status": "failed"}
    )


def test_the_queue_depth_gauge_reads_the_broker_only_when_scraped() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from tandem.tasks.metrics import QueueDepthCollector

    reads: list[int] = []

    def depths() -> dict[str, int]:
        reads.append(1)
        return {"celery": 0, "thinker": 7, "actor": 2, "tools": 0}

    registry = CollectorRegistry(auto_describe=True)
    registry.register(QueueDepthCollector(depths))
    assert reads == []  # registering describes it: nothing read
    body = generate_latest(registry).decode()
    assert 'tandem_queue_depth{queue="thinker"} 7.0' in body
    assert 'tandem_queue_depth{queue="celery"} 0.0' in body
    assert len(reads) == 1
    restricted = generate_latest(registry.restricted_registry(["python_info"])).decode()
    assert restricted == "" and len(reads) == 1  # a scrape of other names never reaches the broker


def test_a_broker_that_cannot_be_read_gives_no_depth_rather_than_zero() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from tandem.tasks.metrics import QueueDepthCollector

    def broken() -> dict[str, int]:
        raise ConnectionError("broker down")

    registry = CollectorRegistry()
    registry.register(QueueDepthCollector(broken))
    body = generate_latest(registry).decode()
    assert "# TYPE tandem_queue_depth gauge" in body and "tandem_queue_depth{" not in body
