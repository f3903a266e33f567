"""The Celery application. Workers start with ``celery -A tandem.tasks.app worker`` (or ``tandem worker``).

``Settings`` never enter ``app.conf``: Flower's worker-config page and ``celery inspect conf`` show
``app.conf``, and Celery masks only the keys it knows. The tasks read the settings from
``tandem.tasks.app.settings`` (through ``tandem.tasks.runtime``) instead.
"""

from __future__ import annotations

from celery import Celery

from tandem.broker_config import Settings, celery_config
from tandem.broker_config.delays import Celery as QuorumCelery
from tandem.tasks import replay, signers


def create_app(settings: Settings) -> Celery:
    """A Celery app configured for ``settings``, with tandem's tasks registered.

    Its tasks show no secrets in Flower or logs (``tandem.tasks.task_base``). With
    ``settings.signing`` every task message is signed (Celery's ``auth`` serializer) and only
    signed messages are accepted, each once, for its own task id, before it expires
    (``tandem.tasks.replay``); the credentials in ``settings`` are registered for redaction.
    """
    settings.register_secrets()
    # Quorum queues delay messages in RabbitMQ, in whole seconds (``tandem.broker_config.delays``).
    app_cls = QuorumCelery if settings.rabbitmq_queue_type == "quorum" else Celery
    celery_app = app_cls(
        "tandem",
        task_cls="tandem.tasks.task_base:TandemTask",
        # Its URL names the broker (Flower's queue views pick their client by it).
        amqp="tandem.broker_config.connection:TandemAMQP",
    )
    celery_app.conf.update(celery_config(settings))
    if settings.signing is not None:
        celery_app.setup_security(allowed_serializers=["json"], serializer="json")
        # The same check, telling each task which certificate signed it (tenants by certificate).
        signers.install(settings.signing.key, settings.signing.cert, settings.signing.cert_store)
        replay.install(settings.signing.max_age)  # each message bound to its id, expiry and nonce
    # Workers import the tasks and their start-up hooks; clients only send by name.
    celery_app.conf.imports = (
        "tandem.tasks.steps.intake",
        "tandem.tasks.steps.model",
        "tandem.tasks.steps.compact",
        "tandem.tasks.steps.tools",
        "tandem.tasks.steps.finalize",
        "tandem.tasks.control.decide",
        "tandem.tasks.control.answer",
        "tandem.tasks.control.resume",
        "tandem.tasks.webhooks.delivery",
        "tandem.tasks.webhooks.sweeper",
        "tandem.tasks.control.messages",
        "tandem.tasks.control.follow_up",
        "tandem.tasks.worker_signals",
        "tandem.tasks.tenants.sweeper",
    )
    return celery_app


settings = Settings.from_env()
app = create_app(settings)
