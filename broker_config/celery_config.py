"""The Celery configuration: JSON only, late acks, per-role queues and routes, events on demand."""

from __future__ import annotations

import ssl
from typing import Any

from kombu import Exchange, Queue

from tandem.broker_config.intake_lanes import IntakeLanes
from tandem.broker_config.sentinel import SentinelUrl, is_sentinel_url
from tandem.broker_config.settings import Settings
from tandem.broker_config.transport import SENTINEL_TRANSPORT, TRANSPORT

ROLE_QUEUES = ("thinker", "actor", "tools")

TASK_QUEUES: dict[str, str] = {
    "tandem.thinker_turn": "thinker",
    "tandem.actor_turn": "actor",
    "tandem.react_turn": "actor",
    "tandem.finalize": "actor",
    "tandem.compact_thinker": "thinker",
    "tandem.compact_actor": "actor",
    "tandem.run_tool": "tools",
    "tandem.collect_tools": "tools",
}
"""Where each step runs; ``tandem.infer`` goes to the intake queue (``celery`` by default)."""

STEP_EXCHANGE = "tandem.steps"
"""The topic exchange of the role queues when they are quorum queues (see ``task_queues``)."""


def task_queues(settings: Settings) -> list[Queue]:
    """The intake queue (and its lanes, ``TANDEM_INTAKE_LANES``) and the three role queues,
    declared as the broker needs them (a lane as the intake queue).

    - Redis: plain queues; kombu keeps ten lists per queue, one per priority level.
    - RabbitMQ, classic queues: the role queues carry ``x-max-priority`` (``JobSpec.priority``).
      The intake queue is declared without arguments: a plain Celery client (any service sending
      ``tandem.infer`` by name) declares that queue itself, with none, and RabbitMQ refuses a
      declaration whose arguments differ from the queue's.
    - RabbitMQ, quorum queues (``TANDEM_RABBITMQ_QUEUE_TYPE=quorum``): every queue carries
      ``x-queue-type: quorum`` and nothing else. RabbitMQ 3 refuses ``x-max-priority`` on a quorum
      queue (RabbitMQ 4 favours priority 5 and up 2:1 over the rest, without it), and a plain
      client must declare the intake queue the same way (``task_default_queue_type = "quorum"``).
      The role queues are bound to a topic exchange, not a direct one, so that a step sent with a
      countdown (a parked or backed-off step) waits in RabbitMQ's delay queues (Celery's native
      delayed delivery) instead of in a worker, where it would hold one of the worker's fixed
      prefetch slots until its time came.
    """
    intake = IntakeLanes.of(settings).queues  # the intake queue, then its lanes (if any)
    if not settings.broker_url.startswith(("amqp", "pyamqp")):
        return [*(Queue(name) for name in intake), *(Queue(name) for name in ROLE_QUEUES)]
    if settings.rabbitmq_queue_type == "classic":
        return [
            *(Queue(name) for name in intake),
            *(Queue(name, queue_arguments={"x-max-priority": 9}) for name in ROLE_QUEUES),
        ]
    quorum = {"x-queue-type": "quorum"}
    steps = Exchange(STEP_EXCHANGE, type="topic")
    return [
        *(Queue(name, queue_arguments=quorum) for name in intake),
        *(Queue(name, steps, routing_key=name, queue_arguments=quorum) for name in ROLE_QUEUES),
    ]


def celery_config(settings: Settings) -> dict[str, Any]:
    """The ``app.conf`` values for ``settings``.

    - Only JSON crosses the broker and the result backend.
    - ``acks_late`` + ``reject_on_worker_lost`` + prefetch 1: a message leaves the queue only when
      its step has finished, and a worker holds at most one message per thread it runs.
    - Every step inherits its job's priority (``task_inherit_parent_priority``); the queues
      honour it (Redis priority levels, RabbitMQ ``x-max-priority``).
    - The visibility timeout exceeds the hard time limit of a step, so Redis never redelivers a
      step that is still running; a step whose worker died is taken over sooner, through its
      lease (``tandem.tasks.state.leases``), after ``lease_seconds``.
    """
    visibility = settings.visibility_timeout
    # Every Redis connection (broker, result backend) times out and keeps itself alive, so a
    # half-open connection raises (and the step is retried) instead of blocking for ever.
    sockets = {
        "socket_timeout": settings.redis_socket_timeout,
        "socket_connect_timeout": settings.redis_connect_timeout,
        "socket_keepalive": True,
        "health_check_interval": 30,
    }
    amqp = settings.broker_url.startswith(("amqp", "pyamqp"))
    # Priority (``JobSpec.priority``): classic RabbitMQ queues are declared with ``x-max-priority``
    # (``task_queues``); Celery's Redis transport keeps one list per priority level and serves
    # level 0 first.
    transport: dict[str, Any] = {"visibility_timeout": visibility}
    broker: dict[str, Any] = {}
    if not amqp:
        transport.update(priority_steps=list(range(10)), queue_order_strategy="priority")
        if settings.broker_url.startswith(("redis://", "rediss://")):
            # tandem's channel: it outlives a lost connection and a malformed message, which
            # kombu's own does not (``tandem.broker_config.transport``). (kombu picks its own for
            # ``redis+socket://`` whatever is asked.)
            broker["broker_transport"] = TRANSPORT
            transport["dead_letter_key"] = f"{settings.prefix}:dead-letters"
            if settings.broker_url.startswith("rediss://"):
                # What kombu's scheme would have set: naming the transport skips it.
                broker["broker_use_ssl"] = {"ssl_cert_reqs": ssl.CERT_NONE}
        elif is_sentinel_url(settings.broker_url):
            # tandem's channel over kombu's Sentinel channel: the master the Sentinels name, found
            # again after a failover (``tandem.broker_config.sentinel``).
            parsed = SentinelUrl.parse(settings.broker_url, "TANDEM_BROKER_URL")
            broker["broker_url"], options = parsed.broker(sockets)
            broker["broker_transport"] = SENTINEL_TRANSPORT
            transport.update(options, dead_letter_key=f"{settings.prefix}:dead-letters")
            if (use_ssl := parsed.celery_ssl()) is not None:
                broker["broker_use_ssl"] = use_ssl
        if settings.broker_ack_emulation is False:
            transport["ack_emulation"] = False
        elif settings.broker_ack_emulation is None and "broker_transport" in broker:
            # Step messages are re-sent by the reconciler: no "unacked" copy of them in Redis.
            transport["resent_queues"] = list(ROLE_QUEUES)
        if settings.intake_lanes and "broker_transport" in broker:
            # tandem's channel takes the intake queue and its lanes in turn (``intake_lanes.LaneCycle``)
            transport["rotated_queues"] = list(IntakeLanes.of(settings).queues)
    backend: dict[str, Any] = {"result_backend": settings.result_backend}
    backend_options: dict[str, Any] = {"visibility_timeout": visibility}
    if is_sentinel_url(settings.result_backend):
        # Celery's Sentinel result backend (``sentinel://`` URLs joined by ``;``, the master's name
        # in its transport options, TLS in ``redis_backend_use_ssl``).
        parsed = SentinelUrl.parse(settings.result_backend, "TANDEM_RESULT_BACKEND")
        backend["result_backend"], options = parsed.backend(sockets)
        backend_options.update(options)
        if (use_ssl := parsed.celery_ssl()) is not None:
            backend["redis_backend_use_ssl"] = use_ssl
    routes = {name: {"queue": queue} for name, queue in TASK_QUEUES.items()}
    routes["tandem.infer"] = {"queue": settings.intake_queue}
    routes["tandem.decide"] = {"queue": settings.intake_queue}  # by name, from any client
    routes["tandem.answer"] = {"queue": settings.intake_queue}
    routes["tandem.resume"] = {"queue": settings.intake_queue}
    routes["tandem.fork"] = {"queue": settings.intake_queue}
    routes["tandem.webhook"] = {"queue": settings.intake_queue}  # tandem.tasks.webhooks
    routes["tandem.message"] = {"queue": settings.intake_queue}
    routes["tandem.follow_up"] = {"queue": settings.intake_queue}
    lanes = IntakeLanes.of(settings)  # with lanes, ``tandem.infer`` goes to its tenant's lane first
    routers: Any = [lanes, routes] if lanes.count else routes
    return {
        "broker_url": settings.broker_url,
        **backend,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "event_serializer": "json",
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_default_queue": settings.intake_queue,
        "task_queues": task_queues(settings),
        "task_inherit_parent_priority": True,
        "task_routes": routers,
        # Nobody reads a step task's own result (a job's result is stored under the job id when it
        # ends): storing and publishing it would cost every step a SETEX and a PUBLISH.
        "task_annotations": {name: {"ignore_result": True} for name in TASK_QUEUES},
        # Task events cost a PUBLISH per task and state (received, started, succeeded) and one per
        # message sent: off unless ``TANDEM_TASK_EVENTS``. Flower turns the workers' events on
        # itself while it runs (its ``enable_events`` broadcast, repeated for workers started later).
        # No STARTED state in the result backend (a GET, SETEX and PUBLISH per job): a job's status
        # is its record's (``JobHandle.status``).
        "task_track_started": False,
        "task_send_sent_event": settings.task_events,
        "worker_send_task_events": settings.task_events,
        # Not ``result_extended``: it would copy every task's arguments (a whole spec) into the
        # result backend, where Flower and any backend reader see them.
        "result_extended": False,
        "result_expires": settings.result_expires,
        "task_time_limit": settings.task_time_limit,
        "task_soft_time_limit": max(settings.task_time_limit - 30, settings.task_time_limit * 0.9),
        "broker_transport_options": {**transport, **sockets},
        **broker,
        "result_backend_transport_options": backend_options,
        "redis_socket_timeout": settings.redis_socket_timeout,
        "redis_socket_connect_timeout": settings.redis_connect_timeout,
        "redis_socket_keepalive": True,
        "redis_backend_health_check_interval": 30,
        "broker_connection_retry_on_startup": True,
        # A worker never gives up on its broker: it reconnects after an outage of any length.
        "broker_connection_max_retries": None,
        # A channel error while (re)connecting is retried like a lost connection: after a network
        # cut RabbitMQ may hold the dead connection's exclusive queues (Celery's remote-control
        # queue) until it notices, and refuses their new declaration with RESOURCE_LOCKED.
        "broker_channel_error_retry": True,
        # Celery's remote-control queue is exclusive by default: after a network cut RabbitMQ did
        # not notice, the dead connection holds it, and the worker could not reconnect until
        # RabbitMQ's heartbeat timeout dropped that connection (minutes). Shared, it is taken again
        # at once (it still expires when no worker uses it).
        "control_queue_exclusive": False,
        # After a reconnect Celery would take one message at a time until the messages of the lost
        # connection are acknowledged, which they cannot be: the worker stalled at one.
        "worker_enable_prefetch_count_reduction": False,
        "worker_cancel_long_running_tasks_on_connection_loss": False,
        "worker_hijack_root_logger": False,
        # Celery's consumer, but a malformed task message drops that message, not the worker.
        "worker_consumer": "tandem.broker_config.consumer:Consumer",
        **_signing(settings),
        **_quorum(settings),
    }


def _quorum(settings: Settings) -> dict[str, Any]:
    """What quorum queues need of Celery (``task_queues`` declares them): per-consumer QoS, which
    Celery picks when it detects them (a quorum queue refuses a global prefetch limit); queues it
    creates on demand and its delay queues of the same type."""
    if settings.rabbitmq_queue_type != "quorum":
        return {}
    return {
        "worker_detect_quorum_queues": True,
        "task_default_queue_type": "quorum",
        "broker_native_delayed_delivery_queue_type": "quorum",
    }


def _signing(settings: Settings) -> dict[str, Any]:
    """Celery's message signing (the ``auth`` serializer) when ``TANDEM_SIGNING_*`` is set."""
    if settings.signing is None:
        return {}
    return {
        "security_key": settings.signing.key,
        "security_certificate": settings.signing.cert,
        "security_cert_store": settings.signing.cert_store,
        "security_digest": "sha256",
        "task_serializer": "auth",
        "accept_content": ["auth"],
    }
