"""Configuration: ``Settings`` (the only reader of the environment) and the Celery config."""

from tandem.broker_config.celery_config import ROLE_QUEUES, TASK_QUEUES, celery_config
from tandem.broker_config.settings import RoleSettings, Settings

__all__ = ["ROLE_QUEUES", "TASK_QUEUES", "RoleSettings", "Settings", "celery_config"]
