"""Attacks on the README's durability promises with RabbitMQ as the broker (issue 22): the job
store's Redis down under a RabbitMQ broker, and the connections to RabbitMQ cut (reset, or left
silent on the broker's side). Real ``tandem worker`` processes; a worker exiting by itself fails
the test.
"""

from __future__ import annotations

import time

import pytest

from tests.integration.breaking import (
    FAST,
    SMALL,
    CutLink,
    charges,
    checked,
    each_event_once,
    ended,
    jobs_with_charges,
    own_cluster,
    plan_jobs,
    poll,
    rabbitmq_vhost,
)
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, _cluster_on, _exclusive_db

pytestmark = pytest.mark.integration


def test_a_job_store_outage_under_a_rabbitmq_broker() -> None:
    """RabbitMQ carries the messages and the job store (AOF) restarts, down 10 s, mid-run: steps
    delivered meanwhile meet no Redis; every job completes, no worker exits."""
    with (
        rabbitmq_vhost() as amqp,
        own_cluster({**FAST, "TANDEM_BROKER_URL": amqp}) as ((cluster, _, _), server),
    ):
        cluster.start("thinker", "actor", "tools", concurrency=SMALL)
        handles = plan_jobs(cluster, 6, "rabbit store outage")
        poll(lambda: jobs_with_charges(cluster, 2), EVENT_SECONDS, "two jobs in their first tool round")
        server.restart(down_for=10)
        ended(cluster, handles, RESULT_SECONDS)
        checked(cluster, handles)
        assert [line for h in handles for line in each_event_once(cluster, h.id)] == []


@pytest.mark.parametrize("broker_side", ["reset", "silent"])
def test_a_network_cut_to_rabbitmq(redis_base: str, broker_side: str) -> None:
    """Every connection to RabbitMQ cut, and new ones refused, for 10 s while tool calls run. The
    workers see their connections reset at once; RabbitMQ sees them reset too (``reset``, as when
    it restarts), or, as in a network cut or a worker host's network going away, hears nothing
    (``silent``: it drops them only at its heartbeat timeout). Every worker reconnects, takes
    messages again, and every job completes once."""
    with rabbitmq_vhost() as amqp, _exclusive_db() as db:
        link = CutLink(("127.0.0.1", 5672)).start()
        via_link = amqp.replace("127.0.0.1:5672", f"127.0.0.1:{link.port}")
        try:
            clusters = _cluster_on(f"{redis_base}/{db}", TANDEM_BROKER_URL=via_link, **FAST)
            cluster, _, _ = next(clusters)
            try:
                cluster.start("thinker", "actor", "tools", concurrency=SMALL)
                handles = plan_jobs(cluster, 6, "rabbit cut")

                def calls_under_way() -> bool:  # charge_card records its start, then takes 1.5 s
                    return len([c for c in charges(cluster) if c["start"] > time.time() - 1.0]) >= 2

                poll(calls_under_way, EVENT_SECONDS, "two charges under way", every=0.02)
                link.cut(silent_server=broker_side == "silent")
                time.sleep(10)
                link.mend()
                ended(cluster, handles, RESULT_SECONDS)
                checked(cluster, handles)
                assert [line for h in handles for line in each_event_once(cluster, h.id)] == []
            finally:
                next(clusters, None)
        finally:
            link.stop()
