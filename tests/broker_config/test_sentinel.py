"""The Sentinel URL form (``tandem.broker_config.sentinel``): what is read, what is refused and how
the refusal reads, and how one URL maps onto kombu's broker, Celery's result backend and redis-py's
clients. Nothing here connects: the clients meet real Sentinels and a failover in
``tests/integration/test_redis_sentinel.py``."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from redis.sentinel import SentinelConnectionPool

from tandem.broker_config import Settings, celery_config
from tandem.broker_config.errors import SettingsError
from tandem.broker_config.job_redis import job_store_client
from tandem.broker_config.sentinel import SentinelUrl, is_sentinel_url, masked
from tandem.broker_config.sentinel_clients import sentinel_address
from tandem.broker_config.transport import SENTINEL_TRANSPORT, SentinelChannel
from tandem.client.outages import bounded, redis_address
from tandem.tasks.app import create_app
from tandem.tasks.state.async_store import async_redis_factory
from tandem.tasks.state.results import ResultDelivery
from tandem.tasks.state.store import JobStore
from tandem.toolkit import redaction

URL = "redis+sentinel://app:s%40cret@10.0.0.1:26379,10.0.0.2:26380/mymaster/3"


def test_the_url_names_the_sentinels_the_service_the_database_and_the_credentials() -> None:
    url = SentinelUrl.parse(URL)
    assert url.sentinels == (("10.0.0.1", 26379), ("10.0.0.2", 26380))
    assert (url.service, url.db, url.tls) == ("mymaster", 3, False)
    assert (url.username, url.password) == ("app", "s@cret")
    assert (url.sentinel_username, url.sentinel_password) == (None, None)
    assert url.master_kwargs() == {"db": 3, "username": "app", "password": "s@cret"}
    assert url.url == URL  # the form Settings keeps, read back as written


def test_defaults_a_sentinel_port_database_zero_ipv6_and_the_sentinels_own_password() -> None:
    url = SentinelUrl.parse("redis+sentinel://:pw@s1,[::1]:26380/svc?sentinel_password=spw")
    assert url.sentinels == (("s1", 26379), ("::1", 26380))
    assert (url.service, url.db, url.username, url.password) == ("svc", 0, None, "pw")
    assert url.sentinel_password == "spw"
    assert url.sentinel_kwargs({"socket_timeout": 3.0, "health_check_interval": 30}) == {
        "socket_timeout": 3.0,
        "password": "spw",
    }
    assert SentinelUrl.parse(url.url) == url
    assert url.url == "redis+sentinel://:pw@s1:26379,[::1]:26380/svc/0?sentinel_password=spw"


def test_celerys_form_naming_its_master_reads_as_the_same_url() -> None:
    celery = "sentinel://app:s%40cret@10.0.0.1:26379/3;sentinel://10.0.0.2:26380/3?master_name=mymaster"
    assert is_sentinel_url(celery)
    assert SentinelUrl.parse(celery) == SentinelUrl.parse(URL)
    settings = Settings.from_env({"TANDEM_BROKER_URL": celery})
    assert settings.broker_url == settings.redis_url == settings.result_backend == URL


@pytest.mark.parametrize(
    ("url", "says"),
    [
        pytest.param("redis+sentinel://h:26379", "names no service", id="no-service"),
        pytest.param("redis+sentinel://h:26379/svc/x", "database 'x' is not a number", id="db"),
        pytest.param("redis+sentinel://h:26379/svc/0/1", "more than <service>/<db>", id="extra-path"),
        pytest.param("redis+sentinel:///svc/0", "names no Sentinel", id="no-sentinel"),
        pytest.param("redis+sentinel://h:port/svc/0", "Sentinel 'h:port' is not host:port", id="port"),
        pytest.param("redis+sentinel://h:99999/svc/0", "Sentinel 'h:99999' is not host:port", id="range"),
        pytest.param("redis+sentinel://h/svc/0?db=2", "unknown option(s) ['db']", id="unknown"),
        pytest.param(
            "redis+sentinel://h/svc/0?ssl_ca_certs=/x", "TLS options need rediss+sentinel", id="tls-option"
        ),
        pytest.param("rediss+sentinel://h/svc/0", "without certificates: add ?ssl_ca_certs=", id="no-certs"),
        pytest.param(
            "rediss+sentinel://h/svc/0?ssl_ca_certs=/no/ca.pem", "is not a readable file", id="missing-ca"
        ),
        pytest.param(
            "rediss+sentinel://h/svc/0?ssl_cert_reqs=maybe", "ssl_cert_reqs='maybe' is not one of", id="reqs"
        ),
        pytest.param(
            "sentinel://h1:26379;sentinel://h2:26379", "does not name the master", id="celery-no-master"
        ),
        pytest.param(
            "sentinel://h1/1;sentinel://h2/2?master_name=m", "names databases [1, 2]", id="celery-two-dbs"
        ),
        pytest.param(
            "sentinel://h1/1;redis://h2/1?master_name=m", "is not sentinel://host:port", id="celery-mixed"
        ),
    ],
)
@pytest.mark.parametrize("name", ["TANDEM_BROKER_URL", "TANDEM_RESULT_BACKEND", "TANDEM_REDIS_URL"])
def test_a_bad_sentinel_url_is_one_line_naming_the_variable_and_the_shape(
    url: str, says: str, name: str
) -> None:
    secret = url.replace("://", "://u:hunter22@", 1)
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({name: secret})
    message = str(caught.value)
    assert message.startswith(f"{name}=") and says in message and "\n" not in message
    assert "hunter22" not in message and "u:***@" in message


def test_every_password_is_masked_in_messages() -> None:
    assert masked(URL) == "redis+sentinel://app:***@10.0.0.1:26379,10.0.0.2:26380/mymaster/3"
    assert masked("sentinel://:a@h1/0;sentinel://:b@h2/0?master_name=m&sentinel_password=c") == (
        "sentinel://:***@h1/0;sentinel://:***@h2/0?master_name=m&sentinel_password=***"
    )
    assert masked("redis://h:6379/0") == "redis://h:6379/0"


def test_each_variable_takes_the_form_and_the_others_default_from_the_broker() -> None:
    on_broker = Settings.from_env({"TANDEM_BROKER_URL": URL})
    assert on_broker.broker_url == on_broker.redis_url == on_broker.result_backend == URL
    store_only = Settings.from_env({"TANDEM_BROKER_URL": "redis://b:6379/1", "TANDEM_REDIS_URL": URL})
    assert (store_only.redis_url, store_only.result_backend) == (URL, URL)
    backend_only = Settings.from_env(
        {
            "TANDEM_BROKER_URL": "amqp://mq//",
            "TANDEM_REDIS_URL": "redis://r:6379/2",
            "TANDEM_RESULT_BACKEND": URL,
        }
    )
    assert (backend_only.redis_url, backend_only.result_backend) == ("redis://r:6379/2", URL)
    cluster = Settings.from_env({"TANDEM_BROKER_URL": URL, "TANDEM_REDIS_URL": "redis+cluster://n1:7000/"})
    assert cluster.result_backend == URL  # the broker's Sentinel master: Celery's backend can use it


def test_the_broker_is_tandems_sentinel_transport_on_one_url_with_every_sentinel_in_its_options() -> None:
    conf = celery_config(Settings.from_env({"TANDEM_BROKER_URL": URL + "?sentinel_password=spw"}))
    # One URL, not Celery's ';' list: kombu would switch to the next "alternate" at a connection
    # error and put its own transport in place of tandem's.
    assert conf["broker_url"] == "sentinel://app:s%40cret@10.0.0.1:26379/3"
    assert conf["broker_transport"] == SENTINEL_TRANSPORT
    options = conf["broker_transport_options"]
    assert options["master_name"] == "mymaster"
    assert options["sentinels"] == [["10.0.0.1", 26379], ["10.0.0.2", 26380]]
    assert options["sentinel_kwargs"] == {
        "socket_timeout": 30.0,
        "socket_connect_timeout": 10.0,
        "socket_keepalive": True,
        "password": "spw",
    }
    assert options["dead_letter_key"] == "tandem:dead-letters"
    assert options["resent_queues"] == ["thinker", "actor", "tools"]
    assert "broker_use_ssl" not in conf and "redis_backend_use_ssl" not in conf
    assert {"master_name", "sentinels", "sentinel_kwargs", "resent_queues"} <= set(
        SentinelChannel.from_transport_options
    )


def test_the_result_backend_is_celerys_sentinel_backend_with_every_sentinel() -> None:
    conf = celery_config(Settings.from_env({"TANDEM_BROKER_URL": URL}))
    assert conf["result_backend"] == "sentinel://app:s%40cret@10.0.0.1:26379/3;sentinel://10.0.0.2:26380/3"
    assert conf["result_backend_transport_options"] == {
        "visibility_timeout": conf["broker_transport_options"]["visibility_timeout"],
        "master_name": "mymaster",
        # Celery's default is {}: Sentinels without timeouts.
        "sentinel_kwargs": {"socket_timeout": 30.0, "socket_connect_timeout": 10.0, "socket_keepalive": True},
    }
    backend = create_app(Settings.from_env({"TANDEM_BROKER_URL": URL})).backend
    assert type(backend).__name__ == "SentinelBackend"
    pool = backend.client.connection_pool
    assert (pool.service_name, pool.connection_kwargs["db"], pool.connection_kwargs["password"]) == (
        "mymaster",
        3,
        "s@cret",
    )


def test_tls_reaches_the_sentinels_the_broker_and_the_backend(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    url = f"rediss+sentinel://h1:26379,h2:26379/svc/0?ssl_ca_certs={ca}"
    conf = celery_config(Settings.from_env({"TANDEM_BROKER_URL": url}))
    expected = {"ssl_ca_certs": str(ca), "ssl_cert_reqs": ssl.CERT_REQUIRED}
    assert conf["broker_use_ssl"] == conf["redis_backend_use_ssl"] == expected
    sentinels = conf["broker_transport_options"]["sentinel_kwargs"]
    assert (sentinels["ssl"], sentinels["ssl_ca_certs"]) == (True, str(ca))
    parsed = SentinelUrl.parse(url)
    assert parsed.master_kwargs() == {"db": 0, "ssl": True, "ssl_ca_certs": str(ca)}
    unchecked = SentinelUrl.parse("rediss+sentinel://h/svc/0?ssl_cert_reqs=none&ssl_check_hostname=false")
    assert unchecked.celery_ssl() == {"ssl_cert_reqs": ssl.CERT_NONE, "ssl_check_hostname": False}
    client = job_store_client(Settings.from_env({"TANDEM_REDIS_URL": url}))
    assert client.connection_pool.connection_class.__name__ == "SentinelManagedSSLConnection"


def test_the_job_stores_client_follows_the_sentinels_master_on_a_blocking_pool() -> None:
    settings = Settings.from_env({"TANDEM_BROKER_URL": URL + "?sentinel_password=spw"})
    client = job_store_client(settings, max_connections=4, pool_timeout=7, socket_timeout=9)
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    assert (pool.service_name, pool.max_connections, pool.timeout) == ("mymaster", 4, 7)
    assert {k: pool.connection_kwargs[k] for k in ("db", "username", "password", "socket_timeout")} == {
        "db": 3,
        "username": "app",
        "password": "s@cret",
        "socket_timeout": 9,
    }
    manager = pool.sentinel_manager
    assert manager.sentinel_kwargs == {"socket_timeout": 9, "password": "spw"}
    assert sentinel_address(client) == (
        "sentinel",
        {("10.0.0.1", 26379), ("10.0.0.2", 26380)},
        "mymaster",
        3,
        "app",
    )
    assert redis_address(client) == "sentinel:mymaster@10.0.0.1:26379,10.0.0.2:26380/3"
    # A client handle's copy: the same master, its commands bounded to 5 s.
    short = bounded(JobStore(client, "tandem")).redis
    assert sentinel_address(short) == sentinel_address(client)
    assert short.connection_pool.connection_kwargs["socket_timeout"] == 5.0
    twin = async_redis_factory(client)()
    assert (twin.connection_pool.service_name, twin.connection_pool.connection_kwargs["db"]) == (
        "mymaster",
        3,
    )


def test_a_job_s_celery_result_is_written_by_its_end_only_on_the_very_same_master() -> None:
    settings = Settings.from_env({"TANDEM_BROKER_URL": URL})
    store = JobStore(job_store_client(settings), "tandem")
    assert ResultDelivery.for_store(create_app(settings), store).in_script
    other_db = Settings.from_env({"TANDEM_BROKER_URL": URL, "TANDEM_RESULT_BACKEND": URL[:-1] + "4"})
    assert not ResultDelivery.for_store(create_app(other_db), store).in_script
    plain = Settings.from_env({"TANDEM_BROKER_URL": URL, "TANDEM_RESULT_BACKEND": "redis://localhost:6379/3"})
    assert not ResultDelivery.for_store(create_app(plain), store).in_script


def test_the_sentinels_password_is_redacted_once_settings_register_their_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(redaction, "secrets", redaction.SecretRegistry())
    Settings.from_env({"TANDEM_BROKER_URL": URL + "?sentinel_password=sentinel-secret"}).register_secrets()
    assert (
        redaction.redact("auth sentinel-secret and s@cret") == f"auth {redaction.MASK} and {redaction.MASK}"
    )


def test_a_commit_pushes_its_successors_only_where_broker_and_store_are_one_sentinel_master(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tandem.tasks.runtime import Runtime
    from tandem.tasks.steps import dispatch

    same = Runtime(Settings.from_env({"TANDEM_BROKER_URL": URL}))
    other = Runtime(Settings.from_env({"TANDEM_BROKER_URL": URL, "TANDEM_REDIS_URL": URL[:-1] + "4"}))
    monkeypatch.setitem(dispatch.app.conf, "broker_transport", SENTINEL_TRANSPORT)
    assert dispatch.pushes_with_commit(same)
    assert not dispatch.pushes_with_commit(other)  # another database: the outbox


def test_the_apis_asyncio_pool_waits_for_a_connection_to_the_sentinel_master() -> None:
    from redis.asyncio.sentinel import SentinelConnectionPool as AsyncSentinelConnectionPool

    from tandem.workers.api.app import _pooled

    client = _pooled(Settings.from_env({"TANDEM_BROKER_URL": URL}), 3, {"socket_timeout": 9})
    pool = client.connection_pool
    assert isinstance(pool, AsyncSentinelConnectionPool)
    assert (pool.service_name, pool.max_connections, pool.timeout) == ("mymaster", 3, 20.0)
    assert (pool.connection_kwargs["db"], pool.connection_kwargs["socket_timeout"]) == (3, 9)
