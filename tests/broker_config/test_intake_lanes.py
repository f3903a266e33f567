"""``tandem.broker_config.intake_lanes``: ``TANDEM_INTAKE_LANES``, the tenant's lane, the router that
sends ``tandem.infer`` there, the order a channel takes the lanes in, and what else knows the lanes."""

from __future__ import annotations

from types import SimpleNamespace

import fakeredis
import pytest

from tandem.broker_config import Settings
from tandem.broker_config.celery_config import celery_config
from tandem.broker_config.consumer import misplaced_step
from tandem.broker_config.errors import SettingsError
from tandem.broker_config.intake_lanes import IntakeLanes, LaneCycle, is_intake, lane_index, read_intake
from tandem.broker_config.queue_depth import RedisQueueDepths, queue_depths
from tandem.broker_config.transport import QUEUE_STAMP
from tandem.tasks.app import create_app

LANES = {"TANDEM_BROKER_URL": "redis://127.0.0.1:6390/2", "TANDEM_INTAKE_LANES": "8"}


def test_no_lanes_unless_asked() -> None:
    assert read_intake({}) == ("celery", 0)
    assert read_intake({"TANDEM_INTAKE_LANES": " 0 ", "TANDEM_INTAKE_QUEUE": "jobs"}) == ("jobs", 0)
    assert read_intake({"TANDEM_INTAKE_LANES": "64"}) == ("celery", 64)
    settings = Settings.from_env({})
    assert (settings.intake_queue, settings.intake_lanes) == ("celery", 0)
    assert Settings.from_env(LANES).intake_lanes == 8


@pytest.mark.parametrize("raw", ["-1", "65", "eight", "2.5", "1e3"])
def test_a_bad_lane_count_is_refused_naming_the_variable_and_value(raw: str) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"TANDEM_INTAKE_LANES": raw})
    assert str(caught.value) == (
        f"TANDEM_INTAKE_LANES={raw!r} must be a whole number from 0 (no lanes) to 64 (e.g. 8), "
        "the same on every worker and client"
    )


def test_the_intake_queue_still_may_not_be_a_role_queue() -> None:
    with pytest.raises(SettingsError, match="TANDEM_INTAKE_QUEUE='actor' clashes with a role queue"):
        Settings.from_env({"TANDEM_INTAKE_QUEUE": "actor"})


def test_a_tenants_lane_is_a_stable_hash_of_its_name() -> None:
    # SHA-256's first 8 bytes, big-endian, modulo the count: fixed values, the same in any process.
    assert [lane_index(t, 8) for t in ("tenant-a", "tenant-b", "default", "warm-up")] == [1, 2, 5, 3]
    lanes = IntakeLanes("celery", 8)
    assert lanes.names == tuple(f"celery.lane{i}" for i in range(8))
    assert lanes.queues == ("celery", *lanes.names)
    assert (lanes.lane("tenant-b"), lanes.lane(None), lanes.lane("default")) == (
        "celery.lane2",
        "celery.lane5",
        "celery.lane5",
    )
    off = IntakeLanes("celery", 0)
    assert (off.names, off.queues, off.lane("tenant-b")) == ((), ("celery",), "celery")


def test_the_router_sends_only_the_intake_task_to_its_owners_lane() -> None:
    app = create_app(Settings.from_env(LANES))
    route = app.amqp.router.route
    assert route({}, "tandem.infer", (), {"spec": {"goal": "g", "owner": "tenant-b"}})["queue"].name == (
        "celery.lane2"
    )
    assert route({}, "tandem.infer", (), {"spec": {"goal": "g"}})["queue"].name == "celery.lane5"  # default
    assert route({}, "tandem.infer", (), {"spec": "not a dict"})["queue"].name == "celery.lane5"
    assert route({}, "tandem.decide", (), {"job_id": "j"})["queue"].name == "celery"
    assert route({}, "tandem.thinker_turn", (), {})["queue"].name == "thinker"
    assert route({"queue": "elsewhere"}, "tandem.infer", (), {"spec": {"owner": "tenant-b"}})[
        "queue"
    ].name == ("elsewhere")  # an explicit queue wins, as with any Celery route


def test_without_lanes_the_configuration_is_as_before() -> None:
    conf = celery_config(Settings.from_env({"TANDEM_BROKER_URL": "redis://127.0.0.1:6390/2"}))
    assert isinstance(conf["task_routes"], dict) and conf["task_routes"]["tandem.infer"] == {
        "queue": "celery"
    }
    assert [q.name for q in conf["task_queues"]] == ["celery", "thinker", "actor", "tools"]
    assert "rotated_queues" not in conf["broker_transport_options"]


def test_with_lanes_they_are_declared_routed_and_rotated() -> None:
    conf = celery_config(Settings.from_env(LANES))
    names = [f"celery.lane{i}" for i in range(8)]
    assert [q.name for q in conf["task_queues"]] == ["celery", *names, "thinker", "actor", "tools"]
    assert conf["broker_transport_options"]["rotated_queues"] == ["celery", *names]
    router, routes = conf["task_routes"]
    assert router == IntakeLanes("celery", 8) and routes["tandem.infer"] == {"queue": "celery"}
    amqp = celery_config(Settings.from_env({**LANES, "TANDEM_BROKER_URL": "amqp://u:p@rabbit//"}))
    assert [q.name for q in amqp["task_queues"]][:9] == ["celery", *names]  # declared like the intake queue
    assert [q.queue_arguments for q in amqp["task_queues"]][:9] == [None] * 9
    assert "rotated_queues" not in amqp["broker_transport_options"]  # RabbitMQ serves its queues in turn


def test_the_cycle_takes_the_intake_queue_and_its_lanes_in_turn_and_keeps_the_rest_in_place() -> None:
    cycle = LaneCycle(["celery", "celery.lane0", "celery.lane1"])
    cycle.update(["thinker", "celery", "celery.lane0", "celery.lane1"])
    cycle.rotate("celery.lane0")
    assert cycle.consume(4) == ["thinker", "celery", "celery.lane1", "celery.lane0"]
    cycle.rotate("thinker")  # a role queue keeps its place, ahead of the intake (kombu's priority order)
    cycle.rotate("celery")
    assert cycle.consume(4) == ["thinker", "celery.lane1", "celery.lane0", "celery"]
    cycle.rotate("celery.lane1")
    cycle.rotate("unknown")
    assert cycle.items == ["thinker", "celery.lane0", "celery", "celery.lane1"]


def _step(queue: str) -> SimpleNamespace:
    message = SimpleNamespace(
        headers={"task": "tandem.run_tool", "id": "t-1"},
        delivery_info={QUEUE_STAMP: queue, "routing_key": queue},
        payload={},
    )
    return message


def test_a_step_pushed_onto_a_lane_is_refused_like_one_on_the_intake_queue() -> None:
    assert is_intake("celery.lane3", "celery") and is_intake("celery", "celery")
    assert not is_intake("celery.lanes", "celery") and not is_intake("tools", "celery")
    reason = misplaced_step(_step("celery.lane3"), "celery")
    assert reason is not None and "arrived on the intake queue 'celery.lane3'" in reason
    assert misplaced_step(_step("tools"), "celery") is None


def test_the_intake_depth_counts_its_lanes() -> None:
    server = fakeredis.FakeServer()
    redis = fakeredis.FakeRedis(server=server)
    redis.rpush("celery", "a")
    redis.rpush("celery.lane2\x06\x164", "b", "c")
    redis.rpush("celery.lane7", "d")
    redis.rpush("actor", "e")
    reader = RedisQueueDepths(
        redis, ("celery", "thinker", "actor", "tools"), {"celery": IntakeLanes("celery", 8).names}
    )
    assert reader.read() == {"celery": 4, "thinker": 0, "actor": 1, "tools": 0}
    built = queue_depths(Settings.from_env(LANES))
    assert isinstance(built, RedisQueueDepths) and built.parts["celery"] == IntakeLanes("celery", 8).names
    plain = queue_depths(Settings.from_env({}))
    assert isinstance(plain, RedisQueueDepths)
    assert plain.parts == {"celery": (), "thinker": (), "actor": (), "tools": ()}
