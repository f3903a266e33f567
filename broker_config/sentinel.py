"""Redis Sentinel: tandem's one URL form for a Redis whose master Sentinel elects, and its mapping
onto the Sentinel support of kombu (the broker), Celery (the result backend) and redis-py (the
job state).

What a failover does: the Sentinels agree that the master is down (after their
``down-after-milliseconds``), promote a replica and answer the new address to whoever asks. Every
client built from this form (kombu's, Celery's, and redis-py's in
``tandem.broker_config.sentinel_clients``) asks the Sentinels for the master's address whenever it
opens a connection, so a connection lost with the old master is opened again on the new one: a
worker's commands fail (and its steps are retried) until the promotion, then go on. Replication
is asynchronous: writes the old master acknowledged but had not yet sent to the promoted replica
are lost with it.

The URL (``TANDEM_BROKER_URL``, ``TANDEM_RESULT_BACKEND``, ``TANDEM_REDIS_URL``)::

    redis+sentinel://[user:password@]h1:26379,h2:26379/<service>/<db>
    rediss+sentinel://[user:password@]h1:26379,h2:26379/<service>/<db>?ssl_ca_certs=/ca.pem

- the hosts are Sentinels (port 26379 when left out), any of them: naming a few rides out one
  being down; ``<service>`` is the name the Sentinels monitor the master under (``sentinel
  monitor <service> ...``); ``<db>`` is the database number (0 when left out);
- ``user:password`` are the master's (and its replicas') credentials; Sentinels with a password
  of their own take ``?sentinel_password=...`` (and ``sentinel_username=...`` for an ACL user);
- ``rediss+sentinel://`` speaks TLS to the Sentinels and to the master, with certificates given
  as for ``rediss://`` (redis-py's names, in the query): ``ssl_ca_certs``, ``ssl_certfile``,
  ``ssl_keyfile``, ``ssl_cert_reqs=none`` to skip the check on purpose (one of ``ssl_ca_certs``
  or ``ssl_cert_reqs=none`` is required), ``ssl_check_hostname``.

Celery's own form, ``sentinel://[:password@]h1:26379/<db>;sentinel://h2:26379/<db>``, is read too
where it names the master (``?master_name=<service>``: Celery takes the name from its transport
options, which tandem's environment does not carry). ``Settings`` keeps every such URL in the form
above (``SentinelUrl.url``), so the rest of tandem meets one form.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode

from tandem.broker_config.errors import SettingsError

SCHEMES = ("redis+sentinel", "rediss+sentinel")
"""tandem's schemes of a Sentinel URL (plain, TLS)."""
CELERY_SCHEME = "sentinel"
"""Celery's and kombu's scheme (one URL per Sentinel, joined by ``;``)."""
DEFAULT_PORT = 26379
TLS_OPTIONS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs", "ssl_check_hostname")
SENTINEL_AUTH = ("sentinel_username", "sentinel_password")
CERT_REQS = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
"""``ssl_cert_reqs``'s values (redis-py's) and the ``ssl`` constants kombu and Celery take for them."""
SHAPE = "redis+sentinel://[user:password@]h1:26379,h2:26379/<service>/<db>"
"""The shape every error message shows."""
_SECRET_QUERY = re.compile(r"(sentinel_password=)[^&;\s]*")
_USERINFO = re.compile(r"(://[^/@;,\s]*?:)[^/@;\s]*@")


def is_sentinel_url(url: str) -> bool:
    """Whether ``url`` names a master through Sentinels (tandem's form or Celery's)."""
    return url.startswith(tuple(f"{s}://" for s in (*SCHEMES, CELERY_SCHEME)))


def masked(url: str) -> str:
    """``url`` with every password in it (each user part, ``sentinel_password``) shown as ``***``."""
    return _SECRET_QUERY.sub(r"\1***", _USERINFO.sub(r"\1***@", url))


@dataclass(frozen=True)
class SentinelUrl:
    """A Sentinel URL, read (``SentinelUrl.parse``): where the Sentinels are, which master, how."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    tls: bool = False
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    sentinel_username: str | None = None
    sentinel_password: str | None = field(default=None, repr=False)
    ssl: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, url: str, name: str = "TANDEM_REDIS_URL") -> SentinelUrl:
        """Read ``url`` (tandem's form, or Celery's naming ``master_name``); ``SettingsError``
        naming ``name``, the part that is wrong, the value and the shape to write."""
        shown = masked(url)
        scheme = url.partition("://")[0]
        if scheme == CELERY_SCHEME:
            return cls._parse_celery(url, name, shown)
        if scheme not in SCHEMES:
            raise SettingsError(f"{name}={shown!r} is not a Sentinel URL: write {SHAPE}")
        rest, _, query = url.partition("://")[2].partition("?")
        netloc, _, path = rest.partition("/")
        userinfo, at, hosts = netloc.rpartition("@")
        username, password = _credentials(userinfo) if at else (None, None)
        sentinels = tuple(_sentinel(part, name, shown) for part in hosts.split(",") if part.strip())
        if not sentinels:
            raise SettingsError(f"{name}={shown!r} names no Sentinel: write {SHAPE}")
        segments = [unquote(s) for s in path.strip("/").split("/")] if path.strip("/") else []
        if not segments:
            raise SettingsError(
                f"{name}={shown!r} names no service (the master's name the Sentinels monitor, as in "
                f"'sentinel monitor <service> ...'): write {SHAPE}"
            )
        if len(segments) > 2:
            raise SettingsError(
                f"{name}={shown!r}: path {path!r} has more than <service>/<db>: write {SHAPE}"
            )
        service = _service(segments[0], name, shown)
        db = _db(segments[1] if len(segments) == 2 else "0", name, shown)
        tls = scheme == "rediss+sentinel"
        options = _options(query, tls, name, shown)
        return cls(
            sentinels,
            service,
            db,
            tls,
            username,
            password,
            options.pop("sentinel_username", None),
            options.pop("sentinel_password", None),
            options,
        )

    @classmethod
    def _parse_celery(cls, url: str, name: str, shown: str) -> SentinelUrl:
        """Celery's ``sentinel://[:pw@]h1:p1/db;sentinel://h2:p2/db?master_name=<service>``."""
        sentinels: list[tuple[str, int]] = []
        dbs: set[int] = set()
        options: dict[str, str] = {}
        username = password = None
        for chunk in (c.strip() for c in url.split(";") if c.strip()):
            scheme, _, rest = chunk.partition("://")
            if scheme != CELERY_SCHEME:
                raise SettingsError(
                    f"{name}={shown!r}: {masked(chunk)!r} is not sentinel://host:port; in Celery's form "
                    "every Sentinel is its own sentinel:// URL, joined by ';' (or write "
                    f"{SHAPE})"
                )
            rest, _, query = rest.partition("?")
            options.update(parse_qsl(query, keep_blank_values=True))
            netloc, _, path = rest.partition("/")
            userinfo, at, host = netloc.rpartition("@")
            if at and password is None and username is None:
                username, password = _credentials(userinfo)
            sentinels.append(_sentinel(host, name, shown))
            dbs.add(_db(path.strip("/") or "0", name, shown))
        service = options.pop("master_name", "")
        if not service:
            raise SettingsError(
                f"{name}={shown!r} does not name the master: Celery reads it from its transport "
                "options, which tandem's environment does not carry. Add ?master_name=<service>, or "
                f"write {SHAPE}"
            )
        if len(dbs) > 1:
            raise SettingsError(f"{name}={shown!r} names databases {sorted(dbs)}: name one")
        checked = _options(urlencode(options), False, name, shown)
        return cls(
            tuple(sentinels),
            _service(service, name, shown),
            dbs.pop(),
            False,
            username,
            password,
            checked.get("sentinel_username"),
            checked.get("sentinel_password"),
        )

    @property
    def url(self) -> str:
        """The URL in tandem's form, credentials included (``Settings`` keeps this form)."""
        userinfo = self._userinfo()
        hosts = ",".join(_hostport(host, port) for host, port in self.sentinels)
        query = {**self.ssl}
        if self.sentinel_username is not None:
            query["sentinel_username"] = self.sentinel_username
        if self.sentinel_password is not None:
            query["sentinel_password"] = self.sentinel_password
        tail = f"?{urlencode(query)}" if query else ""
        scheme = SCHEMES[1] if self.tls else SCHEMES[0]
        return f"{scheme}://{userinfo}{hosts}/{quote(self.service, safe='')}/{self.db}{tail}"

    # -- redis-py ---------------------------------------------------------------------------------

    def _tls_kwargs(self) -> dict[str, Any]:
        """redis-py's keyword arguments for TLS (none without it)."""
        if not self.tls:
            return {}
        kwargs: dict[str, Any] = {}
        for key, value in self.ssl.items():
            kwargs[key] = value.lower() in ("1", "true", "yes") if key == "ssl_check_hostname" else value
        return kwargs

    def master_kwargs(self) -> dict[str, Any]:
        """redis-py's connection arguments for the master: database, credentials, TLS."""
        kwargs: dict[str, Any] = {"db": self.db, "username": self.username, "password": self.password}
        if self.tls:
            kwargs["ssl"] = True
        kwargs.update(self._tls_kwargs())
        return {k: v for k, v in kwargs.items() if v is not None}

    def sentinel_kwargs(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """redis-py's connection arguments for the Sentinels: the socket timeouts and keepalive of
        ``options`` (never left out: a Sentinel that stops answering must not hang a client), the
        Sentinels' own credentials, TLS."""
        kwargs: dict[str, Any] = {k: v for k, v in options.items() if k.startswith("socket_")}
        kwargs["username"] = self.sentinel_username
        kwargs["password"] = self.sentinel_password
        if self.tls:
            kwargs["ssl"] = True
            kwargs.update(self._tls_kwargs())
        return {k: v for k, v in kwargs.items() if v is not None}

    # -- Celery and kombu -------------------------------------------------------------------------

    def _userinfo(self) -> str:
        """``user:password@`` (quoted), ``""`` without credentials."""
        if self.username is None and self.password is None:
            return ""
        secret = "" if self.password is None else ":" + quote(self.password, safe="")
        return quote(self.username or "", safe="") + secret + "@"

    def _celery_url(self, host: str, port: int, credentials: bool) -> str:
        userinfo = self._userinfo() if credentials else ""
        return f"{CELERY_SCHEME}://{userinfo}{_hostport(host, port)}/{self.db}"

    def celery_ssl(self) -> dict[str, Any] | None:
        """``broker_use_ssl`` / ``redis_backend_use_ssl`` for TLS to the master (``None``: none):
        kombu and Celery take a ``ssl`` module constant for ``ssl_cert_reqs``."""
        if not self.tls:
            return None
        options = self._tls_kwargs()
        options["ssl_cert_reqs"] = CERT_REQS[str(options.get("ssl_cert_reqs", "required")).lower()]
        return options

    def broker(self, sockets: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        """``(broker_url, broker_transport_options)`` for tandem's Sentinel transport
        (``tandem.broker_config.transport.SentinelTransport``).

        One URL (the first Sentinel, with the credentials and database), not Celery's ``;`` list:
        kombu treats a list as alternates and, on a connection error, switches to the next one by
        parsing it again, which replaces the transport named in ``broker_transport`` with its own
        for the ``sentinel`` scheme (tandem's channel would be lost at the first failover). Every
        Sentinel is given in the transport option ``sentinels`` instead."""
        host, port = self.sentinels[0]
        options = {
            "master_name": self.service,
            "sentinels": [[h, p] for h, p in self.sentinels],
            "sentinel_kwargs": self.sentinel_kwargs(sockets),
        }
        return self._celery_url(host, port, credentials=True), options

    def backend(self, sockets: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        """``(result_backend, result_backend_transport_options)`` for Celery's Sentinel result
        backend: Celery's ``;`` list (its backend reads every Sentinel from it, credentials and
        database from the first). ``sentinel_kwargs`` is always given: Celery's default (``{}``)
        would connect to the Sentinels without timeouts."""
        urls = [self._celery_url(h, p, credentials=i == 0) for i, (h, p) in enumerate(self.sentinels)]
        return ";".join(urls), {"master_name": self.service, "sentinel_kwargs": self.sentinel_kwargs(sockets)}


def canonical(url: str, name: str) -> str:
    """``url`` in tandem's form when it is a Sentinel URL (``SettingsError`` when it cannot be
    read), else ``url`` as it is."""
    return SentinelUrl.parse(url, name).url if is_sentinel_url(url) else url


# -- parsing helpers -----------------------------------------------------------------------------


def _credentials(userinfo: str) -> tuple[str | None, str | None]:
    user, colon, secret = userinfo.partition(":")
    return (unquote(user) or None), (unquote(secret) if colon else None)


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _sentinel(part: str, name: str, shown: str) -> tuple[str, int]:
    part = part.strip()
    if part.startswith("["):  # [::1]:26379
        host, _, port = part[1:].partition("]")
        port = port.removeprefix(":")
    else:
        host, _, port = part.partition(":")
    port = port or str(DEFAULT_PORT)
    if not host or not port.isdigit() or not 0 < int(port) < 65536 or "/" in host:
        raise SettingsError(
            f"{name}={shown!r}: Sentinel {part!r} is not host:port; write each Sentinel as host:port, "
            f"comma-separated: {SHAPE}"
        )
    return host, int(port)


def _service(value: str, name: str, shown: str) -> str:
    if not value or any(c.isspace() for c in value):
        raise SettingsError(
            f"{name}={shown!r}: service {value!r} is not a name: write the name the Sentinels monitor the "
            f"master under ('sentinel monitor <service> ...'): {SHAPE}"
        )
    return value


def _db(value: str, name: str, shown: str) -> int:
    if not value.isdigit():
        raise SettingsError(
            f"{name}={shown!r}: database {value!r} is not a number: write {SHAPE} (e.g. /mymaster/0)"
        )
    return int(value)


def _options(query: str, tls: bool, name: str, shown: str) -> dict[str, str]:
    options = dict(parse_qsl(query, keep_blank_values=True))
    allowed = (*SENTINEL_AUTH, *TLS_OPTIONS) if tls else SENTINEL_AUTH
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        hint = "" if tls else " (TLS options need rediss+sentinel://)"
        raise SettingsError(
            f"{name}={shown!r}: unknown option(s) {unknown}; allowed: {', '.join(allowed)}{hint}"
        )
    reqs = options.get("ssl_cert_reqs", "required").lower()
    if tls and reqs not in CERT_REQS:
        raise SettingsError(f"{name}={shown!r}: ssl_cert_reqs={reqs!r} is not one of {', '.join(CERT_REQS)}")
    if tls:
        if "ssl_ca_certs" not in options and options.get("ssl_cert_reqs", "").lower() != "none":
            raise SettingsError(
                f"{name}={shown!r} asks for TLS without certificates: add ?ssl_ca_certs=/path/ca.pem (the CA "
                "that signed the Sentinels' and the master's certificates), or ?ssl_cert_reqs=none to skip "
                "the check"
            )
        for key in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile"):
            path = options.get(key)
            if path is not None and not os.path.isfile(path):
                raise SettingsError(f"{name}={shown!r}: {key}={path!r} is not a readable file")
    return options
