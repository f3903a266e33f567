"""Errors raised by ``tandem.broker_config``.

The tree::

    SettingsError             root: an environment variable holds a value tandem cannot use; the
                              message names the variable, the value and what to set instead
    └── RedisClusterError     TANDEM_REDIS_URL names a Redis Cluster tandem cannot use: a node that is
                              not a member, a cluster in ``fail`` state, none reachable

Settings are read once, at start-up, so every ``SettingsError`` is a deployment mistake to fix
before a worker or client runs.
"""

from __future__ import annotations


class SettingsError(ValueError):
    """A ``TANDEM_*`` setting is invalid; the message names it and says what to write."""


class RedisClusterError(SettingsError):
    """The Redis Cluster of ``TANDEM_REDIS_URL`` cannot hold the job state; the message says why."""
