"""The Celery application. Workers start with ``celery -A tandem.tasks.app worker`` (or ``tandem worker``)."""

from __future__ import annotations

from celery import Celery

from tandem.broker_config import Settings, celery_config


def create_app(settings: Settings) -> Celery:
    """A Celery app configured for ``settings``, with tandem's tasks registered."""
    celery_app = Celery("tandem")
    celery_app.conf.update(celery_config(settings))
    celery_app.conf.tandem_settings = settings
    return celery_app


settings = Settings.from_env()
app = create_app(settings)

import tandem.tasks.turns  # noqa: E402  (registers the tasks on ``app``)
import tandem.tasks.worker_signals  # noqa: E402,F401  (starts the lease watchdog in workers)
