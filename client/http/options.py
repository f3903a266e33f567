"""A client's options, checked once when ``Client`` or ``AsyncClient`` is made.

A client keeps two pools of connections: one for its event streams, one for every other request,
so streams held open never keep a call from being sent. The stream pool is sized to what the API
lets one token hold (``TANDEM_API_MAX_STREAMS``, 100 by default). A request that finds its pool
full waits up to ``timeout`` seconds for a connection, then raises ``PoolExhausted``: the
client's own limit, named with what to do, never mistaken for an API that does not answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import httpx

from tandem.client.http.errors import PoolExhausted

STREAM_SILENCE = 45.0
"""The default of ``stream_silence``: three heartbeats of the API's default interval (15 s)."""


def _seconds(name: str, value: object, *, zero: bool = False) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (value == 0 and not zero)
    ):
        least = "0 or more" if zero else "more than 0"
        raise ValueError(f"{name} must be a number of seconds, {least}, got {value!r}")


def _count(name: str, value: object, default: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a whole number of at least 1 (e.g. {default}), got {value!r}")


@dataclass(frozen=True)
class ClientOptions:
    """What ``Client(...)`` and ``AsyncClient(...)`` take as keywords (docs/api.md):

    - ``timeout``: seconds a request may take, and may wait for a free connection of its pool;
    - ``retry_for``: seconds a read keeps asking through a blip (``tandem.client.http.retries``);
    - ``stream_silence``: seconds an event stream may go without a byte (no event, no heartbeat)
      before it counts as dropped and is resumed after its last event; keep it above the API's
      ``TANDEM_API_HEARTBEAT`` (15 s by default), three heartbeats is safe;
    - ``max_streams``: event streams the client holds open at once (its stream pool);
    - ``max_calls``: other requests in flight at once (its pool for calls).
    """

    timeout: float = 30.0
    retry_for: float = 10.0
    stream_silence: float = STREAM_SILENCE
    max_streams: int = 100
    max_calls: int = 100

    def __post_init__(self) -> None:
        _seconds("timeout", self.timeout)
        _seconds("retry_for", self.retry_for, zero=True)
        _seconds("stream_silence", self.stream_silence)
        _count("max_streams", self.max_streams, 100)
        _count("max_calls", self.max_calls, 100)

    def limits(self, streams: bool) -> httpx.Limits:
        """The httpx limits of the stream pool (``streams``) or of the pool for calls."""
        size = self.max_streams if streams else self.max_calls
        return httpx.Limits(max_connections=size, max_keepalive_connections=min(size, 20))

    def pool_exhausted(self, streams: bool) -> PoolExhausted:
        """The error of a request that waited ``timeout`` seconds for a connection of a full pool."""
        if streams:
            return PoolExhausted(
                f"this client already holds {self.max_streams} event streams open (its max_streams) and "
                f"none closed in {self.timeout:g} s: this is the client's own limit, not the API's. Close "
                "the streams you no longer read (leave their loop, or close the client you made them "
                "with), or make the client with a larger max_streams (the API lets one token hold "
                "TANDEM_API_MAX_STREAMS streams, 100 by default)",
                code="client_streams_full",
            )
        return PoolExhausted(
            f"all {self.max_calls} connections this client keeps for calls (its max_calls) were busy for "
            f"{self.timeout:g} s: this is the client's own limit, not the API's. Make fewer calls at once "
            "on this client, or make it with a larger max_calls",
            code="client_calls_full",
        )
