"""redis-py clients of the master a Sentinel URL names (``tandem.broker_config.sentinel``): the job
store's (sync, on a blocking pool; asyncio), what tells one apart, and the check a worker makes at
start that the Sentinels know the URL's service.

Each client asks the Sentinels for the master's address whenever it opens a connection (redis-py's
``Sentinel.master_for``), and drops its idle connections when the address changes, so it follows a
failover by itself: commands fail while no master answers, and succeed again on the promoted
replica. A connection still open to a master that was demoted meanwhile gets ``READONLY`` on its
first write, which redis-py turns into a reconnect.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from tandem.broker_config.errors import SettingsError
from tandem.broker_config.sentinel import SHAPE, TLS_OPTIONS, SentinelUrl, masked

if TYPE_CHECKING:
    from redis import Redis
    from redis.asyncio import Redis as AsyncRedis

log = logging.getLogger("tandem.redis")


@functools.cache
def _blocking_pool_class() -> type:
    from redis.connection import BlockingConnectionPool
    from redis.sentinel import SentinelConnectionPool

    class BlockingSentinelConnectionPool(SentinelConnectionPool, BlockingConnectionPool):
        """redis-py's Sentinel pool, blocking: past ``max_connections`` a thread waits up to
        ``timeout`` seconds for a free connection (redis-py's own raises at once)."""

    return BlockingSentinelConnectionPool


@functools.cache
def _async_blocking_pool_class() -> type:
    from redis.asyncio.connection import BlockingConnectionPool
    from redis.asyncio.sentinel import SentinelConnectionPool

    class AsyncBlockingSentinelConnectionPool(SentinelConnectionPool, BlockingConnectionPool):
        """The asyncio twin of the blocking Sentinel pool."""

    return AsyncBlockingSentinelConnectionPool


def sentinel_client(
    parsed: SentinelUrl,
    *,
    max_connections: int | None = None,
    pool_timeout: float | None = None,
    **options: Any,
) -> Redis:
    """A client of the master ``parsed`` names: ``Sentinel(...).master_for(service)``. It asks the
    Sentinels for the master's address at every new connection (and drops idle connections to an
    old master), so it follows a failover by itself. ``options``: redis-py's connection arguments
    (timeouts, keepalive); with ``max_connections`` a blocking pool of that many connections."""
    from redis import Redis
    from redis.sentinel import Sentinel

    manager = Sentinel(list(parsed.sentinels), sentinel_kwargs=parsed.sentinel_kwargs(options))
    kwargs: dict[str, Any] = {**options, **parsed.master_kwargs()}
    if max_connections is None:
        return manager.master_for(parsed.service, redis_class=Redis, **kwargs)
    pool = _blocking_pool_class()
    kwargs.update(max_connections=max_connections, timeout=pool_timeout)
    return manager.master_for(parsed.service, redis_class=Redis, connection_pool_class=pool, **kwargs)


def async_sentinel_client(
    parsed: SentinelUrl,
    *,
    max_connections: int | None = None,
    pool_timeout: float | None = None,
    **options: Any,
) -> AsyncRedis:
    """The asyncio twin of ``sentinel_client`` (it connects on first use)."""
    from redis.asyncio import Redis as AsyncRedis
    from redis.asyncio.sentinel import Sentinel

    manager = Sentinel(list(parsed.sentinels), sentinel_kwargs=parsed.sentinel_kwargs(options))
    kwargs: dict[str, Any] = {**options, **parsed.master_kwargs()}
    if max_connections is None:
        return cast("AsyncRedis", manager.master_for(parsed.service, redis_class=AsyncRedis, **kwargs))
    pool = _async_blocking_pool_class()
    kwargs.update(max_connections=max_connections, timeout=pool_timeout)
    client = manager.master_for(parsed.service, redis_class=AsyncRedis, connection_pool_class=pool, **kwargs)
    return cast("AsyncRedis", client)


def with_socket_timeout(client: Any, timeout: float) -> Redis:
    """A client of the same master as the Sentinel client ``client``, on a pool of its own of the
    same kind and size, whose commands wait at most ``timeout`` seconds for an answer."""
    from redis import Redis
    from redis.connection import BlockingConnectionPool

    pool = client.connection_pool
    kwargs = {k: v for k, v in pool.connection_kwargs.items() if k != "connection_pool"}
    kwargs.update(
        socket_timeout=timeout, connection_class=pool.connection_class, max_connections=pool.max_connections
    )
    if isinstance(pool, BlockingConnectionPool):
        kwargs["timeout"] = pool.timeout
    return Redis(connection_pool=type(pool)(pool.service_name, pool.sentinel_manager, **kwargs))


def is_sentinel_client(client: Any) -> bool:
    """Whether ``client`` is a redis-py client of a master found through Sentinels."""
    return hasattr(getattr(client, "connection_pool", None), "sentinel_manager")


def sentinel_address(client: Any) -> tuple[Any, ...] | None:
    """What names the database a Sentinel client reaches: its Sentinels, service, database and
    user (``None`` for another client). Two clients with the same address reach the same keys."""
    pool = getattr(client, "connection_pool", None)
    manager = getattr(pool, "sentinel_manager", None)
    if manager is None or pool is None:
        return None
    nodes = frozenset(
        (
            str(s.connection_pool.connection_kwargs.get("host")),
            int(s.connection_pool.connection_kwargs["port"]),
        )
        for s in manager.sentinels
    )
    kwargs = pool.connection_kwargs
    return ("sentinel", nodes, pool.service_name, int(kwargs.get("db") or 0), kwargs.get("username") or "")


def async_twin(client: Any) -> Callable[[], Any]:
    """A factory of asyncio clients of the master the Sentinel client ``client`` reaches (same
    Sentinels, service, database, credentials and TLS)."""
    from redis.asyncio import Redis as AsyncRedis
    from redis.asyncio.sentinel import Sentinel

    pool = client.connection_pool
    manager = pool.sentinel_manager
    nodes = [
        (s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"])
        for s in manager.sentinels
    ]
    keep = ("db", "username", "password", "socket_timeout", "socket_connect_timeout", *TLS_OPTIONS)
    kwargs = {k: pool.connection_kwargs[k] for k in keep if pool.connection_kwargs.get(k) is not None}
    if "SSL" in getattr(pool.connection_class, "__name__", ""):
        kwargs["ssl"] = True
    sentinel_kwargs = dict(manager.sentinel_kwargs)
    service = pool.service_name
    return lambda: Sentinel(nodes, sentinel_kwargs=sentinel_kwargs).master_for(
        service, redis_class=AsyncRedis, **kwargs
    )


def check_service(parsed: SentinelUrl, name: str, timeout: float = 5.0) -> None:
    """``SettingsError`` (one line) when the Sentinels that answer know no master named
    ``parsed.service``, or refuse the client for want of a password. A Sentinel that does not
    answer is only logged: that is an outage, which workers ride out."""
    from redis import Redis
    from redis.exceptions import AuthenticationError, RedisError, ResponseError

    known: list[str] | None = None
    shown = masked(parsed.url)
    for host, port in parsed.sentinels:
        options = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
        node = Redis(host=host, port=port, **parsed.sentinel_kwargs(options))
        try:
            masters = node.sentinel_masters()
        except (AuthenticationError, ResponseError) as exc:
            if "auth" not in str(exc).lower():
                raise SettingsError(f"{name}={shown!r}: {host}:{port} is not a Sentinel ({exc})") from None
            raise SettingsError(
                f"{name}={shown!r}: the Sentinel {host}:{port} refuses the client ({exc}): give the "
                "Sentinels' own password as ?sentinel_password=... (and sentinel_username=... for an "
                "ACL user)"
            ) from None
        except RedisError as exc:
            log.warning("the Sentinel %s:%s named in %s does not answer: %s", host, port, name, exc)
            continue
        finally:
            node.close()
        if parsed.service in masters:
            return
        known = sorted(str(m) for m in masters)
    if known is not None:
        raise SettingsError(
            f"{name}={shown!r}: the Sentinels monitor no master named {parsed.service!r} (they know "
            f"{known}): write the name of 'sentinel monitor <service> ...' ({SHAPE})"
        )
