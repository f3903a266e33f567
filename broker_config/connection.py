"""The broker connection of tandem's Celery app, whose URL names the broker, not tandem's transport.

tandem's app selects its own kombu transport by class path (``broker_transport``,
``tandem.broker_config.transport``), and kombu writes a connection's URL with that path as its
scheme (``tandem.broker_config.transport:Transport://host:6379/0``). Tools that pick their broker
client by the URL's scheme refuse it: Flower's broker page and ``/api/queues/length`` answered
404 "'redis' broker is not supported". ``BrokerConnection.as_uri`` writes the scheme of the broker
the transport speaks to (``redis``, or ``sentinel`` for the Sentinel transport) instead; the
connection itself (``transport_cls``) is unchanged.
"""

from __future__ import annotations

from typing import Any

from celery.app.amqp import AMQP
from kombu import Connection

from tandem.broker_config.transport import SENTINEL_TRANSPORT, TRANSPORT

SCHEMES = {TRANSPORT: "redis", SENTINEL_TRANSPORT: "sentinel"}
"""The URL scheme written for each of tandem's transports."""


class BrokerConnection(Connection):
    """kombu's ``Connection`` whose ``as_uri`` names the broker's scheme for tandem's transports."""

    def as_uri(self, include_password: bool = False, mask: str = "**", *args: Any, **kwargs: Any) -> str:
        """The connection's URL, with ``redis://`` (``sentinel://``) where kombu writes the class
        path of tandem's transport."""
        uri: str = super().as_uri(include_password, mask, *args, **kwargs)
        transport = self.transport_cls if isinstance(self.transport_cls, str) else None
        scheme = SCHEMES.get(transport or "")
        if transport and scheme and uri.startswith(f"{transport}://"):
            return scheme + uri[len(transport) :]
        return uri


class TandemAMQP(AMQP):
    """Celery's AMQP helper making ``BrokerConnection``s (``Celery(amqp=...)``)."""

    Connection = BrokerConnection


__all__ = ["SCHEMES", "BrokerConnection", "TandemAMQP"]
