"""The job store's Redis (``TANDEM_REDIS_URL``): its URL forms and the one factory of its clients.

The job state lives in one Redis, in one Redis whose master Sentinel elects, or in a Redis Cluster:

- ``redis://host:port/db``, ``rediss://...`` (TLS), ``unix:///path?db=N``: one Redis;
- ``redis+sentinel://[user:password@]h1:26379,h2:26379/<service>/<db>`` (``rediss+sentinel://`` for
  TLS): the master the Sentinels name, followed through a failover (``tandem.broker_config.sentinel``,
  which also maps the form onto Celery's broker and result backend);
- ``redis+cluster://[user:password@]h1:p1,h2:p2[/]``: a Redis Cluster, found from these start-up
  nodes (any of its nodes; naming a few rides out one being down);
- ``rediss+cluster://...?ssl_ca_certs=/ca.pem``: the same over TLS. Certificates are given as for
  ``rediss://``, in the URL's query with redis-py's names: ``ssl_ca_certs`` (the CA that signed
  the nodes' certificates), ``ssl_certfile`` and ``ssl_keyfile`` (a client certificate), and
  ``ssl_cert_reqs=none`` to skip the check on purpose. One of ``ssl_ca_certs`` or
  ``ssl_cert_reqs=none`` is required.

Only the job store may be a cluster: Celery's broker and result backend have no cluster mode, so
``TANDEM_BROKER_URL`` and ``TANDEM_RESULT_BACKEND`` name one Redis (or RabbitMQ for the broker).
With a cluster job store the result backend defaults to a Redis broker's URL.

``job_store_client`` and ``async_job_store_client`` build the clients; a cluster client is checked
once when built (every named node answering is a member, the cluster is not in ``fail`` state),
and a problem is one line (``RedisClusterError``).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import parse_qsl, unquote

from tandem.broker_config import sentinel, sentinel_clients
from tandem.broker_config.errors import RedisClusterError, SettingsError
from tandem.broker_config.sentinel import SentinelUrl, is_sentinel_url

if TYPE_CHECKING:
    from redis import Redis
    from redis.asyncio import Redis as AsyncRedis

    from tandem.broker_config.settings import Settings

log = logging.getLogger("tandem.redis")

CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
PLAIN_SCHEMES = ("redis", "rediss", "unix")
TLS_OPTIONS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs", "ssl_check_hostname")
"""The query options a ``rediss+cluster://`` URL may carry (redis-py's names, as for ``rediss://``)."""


def is_cluster_url(url: str) -> bool:
    """Whether ``url`` names a Redis Cluster (``redis+cluster://`` or ``rediss+cluster://``)."""
    return url.startswith(tuple(f"{s}://" for s in CLUSTER_SCHEMES))


def masked(url: str) -> str:
    """``url`` with its passwords replaced by ``***`` (for messages)."""
    return sentinel.masked(url)


@dataclass(frozen=True)
class ClusterUrl:
    """A ``redis+cluster://`` or ``rediss+cluster://`` URL, read (``ClusterUrl.parse``)."""

    nodes: tuple[tuple[str, int], ...]
    tls: bool = False
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ssl: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, url: str, name: str = "TANDEM_REDIS_URL") -> ClusterUrl:
        """Read ``url``; ``SettingsError`` naming ``name``, the value and what to write instead."""
        shown = masked(url)
        scheme, _, rest = url.partition("://")
        if scheme not in CLUSTER_SCHEMES:
            raise SettingsError(
                f"{name}={shown!r} is not a cluster URL (redis+cluster:// or rediss+cluster://)"
            )
        rest, _, query = rest.partition("?")
        netloc, _, path = rest.partition("/")
        userinfo, at, hosts = netloc.rpartition("@")
        username = password = None
        if at:
            user, colon, secret = userinfo.partition(":")
            username, password = (unquote(user) or None), (unquote(secret) if colon else None)
        if path.strip("/") not in ("", "0"):
            raise SettingsError(
                f"{name}={shown!r} names database {path.strip('/')!r}, but a Redis Cluster has only "
                "database 0: drop the path (redis+cluster://h1:p1,h2:p2/)"
            )
        nodes = tuple(_node(part, name, shown) for part in hosts.split(",") if part.strip())
        if not nodes:
            raise SettingsError(
                f"{name}={shown!r} names no node: write the cluster's nodes as redis+cluster://h1:p1,h2:p2/"
            )
        options = dict(parse_qsl(query, keep_blank_values=True))
        tls = scheme == "rediss+cluster"
        unknown = sorted(set(options) - set(TLS_OPTIONS)) if tls else sorted(options)
        if unknown:
            allowed = ", ".join(TLS_OPTIONS) if tls else "none (TLS options need rediss+cluster://)"
            raise SettingsError(f"{name}={shown!r}: unknown option(s) {unknown}; allowed: {allowed}")
        if tls:
            _check_certificates(options, name, shown)
        return cls(nodes, tls, username, password, options)

    def client_kwargs(self) -> dict[str, Any]:
        """Credentials and TLS options for redis-py's cluster clients."""
        kwargs: dict[str, Any] = {"username": self.username, "password": self.password}
        if self.tls:
            kwargs["ssl"] = True
            for key, value in self.ssl.items():
                kwargs[key] = value.lower() in ("1", "true", "yes") if key == "ssl_check_hostname" else value
        return {k: v for k, v in kwargs.items() if v is not None}


def _node(part: str, name: str, shown: str) -> tuple[str, int]:
    part = part.strip()
    host, _, port = part.rpartition(":") if not part.endswith("]") else (part, "", "")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise SettingsError(
            f"{name}={shown!r}: node {part!r} is not host:port; write each node as host:port, "
            "comma-separated (redis+cluster://10.0.0.1:7000,10.0.0.2:7000/)"
        )
    return host, int(port)


def _check_certificates(options: Mapping[str, str], name: str, shown: str) -> None:
    if "ssl_ca_certs" not in options and options.get("ssl_cert_reqs", "").lower() != "none":
        raise SettingsError(
            f"{name}={shown!r} asks for TLS without certificates: add ?ssl_ca_certs=/path/ca.pem (the CA "
            "that signed the nodes' certificates), or ?ssl_cert_reqs=none to skip the check"
        )
    for key in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile"):
        path = options.get(key)
        if path is not None and not os.path.isfile(path):
            raise SettingsError(f"{name}={shown!r}: {key}={path!r} is not a readable file")


def refuse_cluster(env: Mapping[str, str], name: str, what: str, instead: str) -> None:
    """``SettingsError`` when ``env[name]`` is a cluster URL: ``what`` has no cluster mode; the
    message says to set ``instead``."""
    raw = env.get(name, "").strip()
    if is_cluster_url(raw):
        raise SettingsError(
            f"{name}={masked(raw)!r} names a Redis Cluster, but {what} has no cluster mode: set it to "
            f"{instead}; only TANDEM_REDIS_URL (the job state) may be a cluster"
        )


BROKER_SCHEMES = (
    "redis",
    "rediss",
    "redis+socket",
    *sentinel.SCHEMES,
    sentinel.CELERY_SCHEME,
    "amqp",
    "pyamqp",
)
"""The schemes ``TANDEM_BROKER_URL`` may start with."""


def read_urls(env: Mapping[str, str], default: str) -> tuple[str, str, str]:
    """``(TANDEM_BROKER_URL, TANDEM_REDIS_URL, TANDEM_RESULT_BACKEND)`` from ``env``, checked, a
    Sentinel URL in tandem's form (``tandem.broker_config.sentinel``); ``default`` is the broker's
    URL when unset, the job store's defaults to a Redis broker's, the backend's to the store's."""
    broker = env.get("TANDEM_BROKER_URL", "").strip() or default
    if not broker.startswith(tuple(f"{s}://" for s in BROKER_SCHEMES)):
        allowed = ", ".join(f"{s}://" for s in BROKER_SCHEMES)
        raise SettingsError(
            f"TANDEM_BROKER_URL={masked(broker)!r} is not a supported URL: it must start with one of "
            f"{allowed}"
        )
    broker = sentinel.canonical(broker, "TANDEM_BROKER_URL")
    # A Unix socket is ``redis+socket://`` to Celery and ``unix://`` to redis-py: a default taken
    # from the other variable is translated, never rejected under a variable nobody set.
    if broker.startswith(("redis://", "rediss://")) or is_sentinel_url(broker):
        store_default = broker
    elif broker.startswith("redis+socket://"):
        store_default = "unix://" + broker.removeprefix("redis+socket://")
    else:
        store_default = default
    return (broker, *store_urls(env, broker, store_default))


def store_urls(env: Mapping[str, str], broker: str, default: str) -> tuple[str, str]:
    """``(TANDEM_REDIS_URL, TANDEM_RESULT_BACKEND)`` from ``env``, checked; ``default`` is the
    job store's URL when unset (from the broker's)."""
    raw = env.get("TANDEM_REDIS_URL", "").strip() or default
    schemes = (*PLAIN_SCHEMES, *CLUSTER_SCHEMES, *sentinel.SCHEMES, sentinel.CELERY_SCHEME)
    if not raw.startswith(tuple(f"{s}://" for s in schemes)):
        allowed = ", ".join(f"{s}://" for s in schemes)
        raise SettingsError(
            f"TANDEM_REDIS_URL={masked(raw)!r} is not a supported URL: it must start with one of {allowed}"
        )
    raw = sentinel.canonical(raw, "TANDEM_REDIS_URL")
    refuse_cluster(env, "TANDEM_RESULT_BACKEND", "Celery's result backend", "one Redis (redis://host:6379/0)")
    backend = env.get("TANDEM_RESULT_BACKEND", "").strip()
    if is_cluster_url(raw):
        ClusterUrl.parse(raw)
        if not backend and not (broker.startswith(("redis://", "rediss://")) or is_sentinel_url(broker)):
            raise SettingsError(
                f"TANDEM_REDIS_URL={masked(raw)!r} is a Redis Cluster, which Celery's result backend cannot "
                "use: set TANDEM_RESULT_BACKEND to one Redis (redis://host:6379/0)"
            )
        return raw, backend or broker
    if not backend:
        backend = "redis+socket://" + raw.removeprefix("unix://") if raw.startswith("unix://") else raw
    elif not backend.startswith(("redis://", "rediss://", "redis+socket://")) and not is_sentinel_url(
        backend
    ):
        raise SettingsError(
            f"TANDEM_RESULT_BACKEND={masked(backend)!r} is not a supported URL: it must start with one of "
            "redis://, rediss://, redis+socket://, redis+sentinel://, rediss+sentinel://, sentinel://"
        )
    return raw, sentinel.canonical(backend, "TANDEM_RESULT_BACKEND")


# -- clients ---------------------------------------------------------------------------------


def is_cluster(client: Any) -> bool:
    """Whether ``client`` is one of redis-py's cluster clients (sync or asyncio)."""
    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
    from redis.cluster import RedisCluster

    return isinstance(client, RedisCluster | AsyncRedisCluster)


def redis_options(settings: Settings) -> dict[str, Any]:
    """The keyword arguments of every redis-py client tandem builds: timeouts, keepalive, health checks."""
    return {
        "socket_timeout": settings.redis_socket_timeout,
        "socket_connect_timeout": settings.redis_connect_timeout,
        "socket_keepalive": True,
        "health_check_interval": 30,
        "retry_on_timeout": False,
    }


def job_store_client(
    settings: Settings,
    *,
    max_connections: int | None = None,
    pool_timeout: float | None = None,
    check: bool = True,
    **options: Any,
) -> Redis:
    """The job store's client: a ``Redis`` of ``TANDEM_REDIS_URL`` (for a Sentinel URL, of the master
    the Sentinels name, followed through a failover), or for a cluster URL a
    ``redis.cluster.RedisCluster`` (which takes the same commands, each sent to its key's node).

    With ``max_connections`` each server gets a blocking pool of that many connections, where a
    thread waits up to ``pool_timeout`` seconds for a free one. ``options``: redis-py's keyword
    arguments (timeouts, keepalive). A cluster is checked once (``check_cluster``) unless
    ``check`` is false: ``RedisClusterError`` in one line."""
    from redis import BlockingConnectionPool, Redis

    url = settings.redis_url
    pooled: dict[str, Any] = {}
    if max_connections is not None:
        pooled = {"max_connections": max_connections, "timeout": pool_timeout}
    if is_sentinel_url(url):
        parsed_url = SentinelUrl.parse(url)
        return sentinel_clients.sentinel_client(
            parsed_url, max_connections=max_connections, pool_timeout=pool_timeout, **options
        )
    if not is_cluster_url(url):
        if not pooled:
            return Redis.from_url(url, **options)
        return Redis(connection_pool=BlockingConnectionPool.from_url(url, **pooled, **options))
    from redis.cluster import ClusterNode, RedisCluster
    from redis.exceptions import RedisClusterException, RedisError

    parsed = ClusterUrl.parse(url)
    nodes = [ClusterNode(host, port) for host, port in parsed.nodes]
    auth = parsed.client_kwargs()
    if pooled:
        # One blocking pool per node, where a thread waits its turn. redis-py builds each node's
        # pool from ``connection_pool_class`` only for a client made from a URL (else a plain pool,
        # which raises MaxConnectionsError at once past ``max_connections``): the first node is
        # given as one, its scheme carrying TLS.
        timeout = pooled.pop("timeout")
        pooled["connection_pool_class"] = functools.partial(BlockingConnectionPool, timeout=timeout)
        first = nodes.pop(0)
        host = f"[{first.host}]" if ":" in first.host else first.host
        pooled["url"] = f"{'rediss' if auth.pop('ssl', False) else 'redis'}://{host}:{first.port}"
    try:
        client: RedisCluster = RedisCluster(startup_nodes=nodes, **auth, **pooled, **options)
    except (RedisClusterException, RedisError) as exc:
        raise RedisClusterError(_unusable(url, parsed, exc)) from None
    if check:
        check_cluster(client, parsed, url)
    return cast("Redis", client)


def _unusable(url: str, parsed: ClusterUrl, exc: Exception) -> str:
    nodes = ", ".join(f"{h}:{p}" for h, p in parsed.nodes)
    text = " ".join(str(exc).split())
    if "cluster mode is not enabled" in text.lower() or "cluster support disabled" in text.lower():
        why = (
            f"a named node is not a Redis Cluster node ({text}): name the cluster's nodes, or use "
            "redis:// for one Redis"
        )
    elif "slots" in text.lower() and "cover" in text.lower():
        host, port = parsed.nodes[0]
        why = (
            f"the cluster does not serve every slot ({text}): fix it "
            f"(redis-cli --cluster check {host}:{port})"
        )
    else:
        why = f"no Redis Cluster could be reached at {nodes} ({type(exc).__name__}: {text})"
    return f"TANDEM_REDIS_URL={masked(url)!r}: {why}"


def check_cluster(client: Any, parsed: ClusterUrl, url: str) -> None:
    """Check that every named node that answers is a member of ``client``'s cluster and that none
    reports ``cluster_state:fail``; ``RedisClusterError`` (one line) otherwise. A named node that
    does not answer is only logged: the cluster may be riding out its loss."""
    from redis import Redis
    from redis.exceptions import RedisError

    members = {_text(v.get("node_id")) for v in client.cluster_nodes().values()}
    kwargs = {k: v for k, v in parsed.client_kwargs().items()}
    timeout = client.nodes_manager.connection_kwargs.get("socket_connect_timeout") or 5.0
    for host, port in parsed.nodes:
        node = Redis(host=host, port=port, socket_timeout=timeout, socket_connect_timeout=timeout, **kwargs)
        try:
            myid = _text(node.execute_command("CLUSTER MYID"))
            info = cluster_info(node.execute_command("CLUSTER INFO"))
        except RedisError as exc:
            if "cluster" in str(exc).lower():
                raise RedisClusterError(
                    f"TANDEM_REDIS_URL={masked(url)!r}: node {host}:{port} is not a Redis Cluster node "
                    f"({exc}): name the cluster's nodes, or use redis:// for one Redis"
                ) from None
            log.warning(
                "Redis Cluster node %s:%s named in TANDEM_REDIS_URL does not answer: %s", host, port, exc
            )
            continue
        finally:
            node.close()
        if myid not in members:
            raise RedisClusterError(
                f"TANDEM_REDIS_URL={masked(url)!r}: node {host}:{port} is not a member of the cluster "
                f"the other nodes form (its id {myid[:8]} is not among their {len(members)} nodes): "
                "name only that cluster's nodes"
            )
        if _text(info.get("cluster_state")) != "ok":
            state = _text(info.get("cluster_state"))
            raise RedisClusterError(
                f"TANDEM_REDIS_URL={masked(url)!r}: the Redis Cluster is in {state!r} "
                f"state (node {host}:{port}: {info.get('cluster_slots_ok')} of 16384 slots ok): fix it "
                f"(redis-cli --cluster check {host}:{port}) before starting tandem"
            )


def cluster_info(raw: Any) -> dict[str, str]:
    """``CLUSTER INFO``'s fields, whether redis-py parsed them or not."""
    if isinstance(raw, dict):
        return {_text(k): _text(v) for k, v in raw.items()}
    pairs = (line.partition(":") for line in _text(raw).splitlines())
    return {k.strip(): v.strip() for k, _, v in pairs if k.strip()}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def async_job_store_client(
    settings: Settings, *, pool_timeout: float | None = None, **options: Any
) -> AsyncRedis:
    """The asyncio twin of ``job_store_client`` (no check: it connects on first use):
    ``redis.asyncio.Redis``, a Sentinel master's (on a blocking pool of ``max_connections``, where
    a command waits ``pool_timeout`` seconds for a free one, when both are given), or
    ``redis.asyncio.cluster.RedisCluster``."""
    from redis.asyncio import Redis as AsyncRedis

    url = settings.redis_url
    if is_sentinel_url(url):
        limit = options.pop("max_connections", None)
        return sentinel_clients.async_sentinel_client(
            SentinelUrl.parse(url), max_connections=limit, pool_timeout=pool_timeout, **options
        )
    if not is_cluster_url(url):
        return AsyncRedis.from_url(url, **options)
    from redis.asyncio.cluster import ClusterNode, RedisCluster

    parsed = ClusterUrl.parse(url)
    options.pop("retry_on_timeout", None)  # the asyncio cluster client retries by its own policy
    nodes = [ClusterNode(host, port) for host, port in parsed.nodes]
    return cast("AsyncRedis", RedisCluster(startup_nodes=nodes, **parsed.client_kwargs(), **options))


def async_twin_factory(client: Any) -> Callable[[], Any]:
    """A factory of asyncio cluster clients of the same cluster, credentials and TLS as the sync
    cluster client ``client`` (``tandem.tasks.state.async_store.async_redis_factory``)."""
    from redis.asyncio.cluster import ClusterNode, RedisCluster

    given = client.nodes_manager.connection_kwargs
    keep = ("username", "password", "socket_timeout", "socket_connect_timeout", "ssl", *TLS_OPTIONS)
    kwargs = {k: given[k] for k in keep if given.get(k) is not None}
    if "SSL" in getattr(given.get("connection_class"), "__name__", ""):
        kwargs["ssl"] = True
    nodes = [(n.host, n.port) for n in client.get_primaries()]
    return lambda: RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in nodes], **kwargs)
