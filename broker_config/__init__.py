"""Configuration: ``Settings`` (the only reader of the environment) and the Celery config."""

if __name__ != "tandem.broker_config":  # this folder imported under its bare name, from the repository root
    raise ImportError(
        f"{__name__!r} is tandem's folder broker_config/, installed as the package 'tandem.broker_config': "
        "import tandem.broker_config instead (a bare import would load a second copy, whose classes and "
        "errors are not tandem's)"
    )

from tandem.broker_config.celery_config import ROLE_QUEUES, TASK_QUEUES, celery_config
from tandem.broker_config.settings import RoleSettings, Settings

__all__ = ["ROLE_QUEUES", "TASK_QUEUES", "RoleSettings", "Settings", "celery_config"]
