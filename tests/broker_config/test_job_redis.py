"""``TANDEM_REDIS_URL``'s cluster forms (``tandem.broker_config.job_redis``): what is read, what is
refused and how the refusal reads. The clients themselves meet a real cluster in
``tests/integration/test_redis_cluster.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem.broker_config import Settings
from tandem.broker_config.errors import SettingsError
from tandem.broker_config.job_redis import ClusterUrl, is_cluster_url, masked


def test_a_cluster_url_names_its_nodes_and_credentials() -> None:
    url = ClusterUrl.parse("redis+cluster://app:s%40cret@10.0.0.1:7000,10.0.0.2:7001,[::1]:7002/")
    assert url.nodes == (("10.0.0.1", 7000), ("10.0.0.2", 7001), ("::1", 7002))
    assert (url.username, url.password, url.tls) == ("app", "s@cret", False)
    assert url.client_kwargs() == {"username": "app", "password": "s@cret"}


def test_tls_takes_the_certificates_from_the_query_as_rediss_does(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    url = ClusterUrl.parse(f"rediss+cluster://h:7000/?ssl_ca_certs={ca}&ssl_check_hostname=true")
    assert url.client_kwargs() == {"ssl": True, "ssl_ca_certs": str(ca), "ssl_check_hostname": True}
    unchecked = ClusterUrl.parse("rediss+cluster://h:7000?ssl_cert_reqs=none")
    assert unchecked.client_kwargs() == {"ssl": True, "ssl_cert_reqs": "none"}


@pytest.mark.parametrize(
    ("url", "says"),
    [
        pytest.param(
            "rediss+cluster://h:7000/", "without certificates: add ?ssl_ca_certs=", id="tls-no-certs"
        ),
        pytest.param(
            "rediss+cluster://h:7000/?ssl_ca_certs=/no/ca.pem", "is not a readable file", id="missing-ca"
        ),
        pytest.param("redis+cluster://h:7000/2", "only database 0", id="database"),
        pytest.param("redis+cluster:///", "names no node", id="no-node"),
        pytest.param("redis+cluster://h/", "node 'h' is not host:port", id="no-port"),
        pytest.param(
            "redis+cluster://h:7000/?ssl_ca_certs=/x", "TLS options need rediss+cluster", id="tls-option"
        ),
        pytest.param(
            "rediss+cluster://h:1/?ssl_cert_reqs=none&db=2", "unknown option(s) ['db']", id="unknown"
        ),
    ],
)
def test_a_bad_cluster_url_is_one_line_naming_the_variable(url: str, says: str) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"TANDEM_REDIS_URL": url})
    message = str(caught.value)
    assert message.startswith("TANDEM_REDIS_URL=") and says in message and "\n" not in message


def test_the_result_backend_of_a_cluster_store_is_the_redis_broker_or_one_redis() -> None:
    on_broker = Settings.from_env(
        {"TANDEM_BROKER_URL": "redis://b:6379/1", "TANDEM_REDIS_URL": "redis+cluster://c1:7000,c2:7000/"}
    )
    assert (on_broker.redis_url, on_broker.result_backend) == (
        "redis+cluster://c1:7000,c2:7000/",
        "redis://b:6379/1",
    )
    with pytest.raises(SettingsError, match="set TANDEM_RESULT_BACKEND to one Redis"):
        Settings.from_env({"TANDEM_BROKER_URL": "amqp://mq//", "TANDEM_REDIS_URL": "redis+cluster://c:7000/"})
    with pytest.raises(SettingsError, match="Celery's result backend has no cluster mode"):
        Settings.from_env({"TANDEM_RESULT_BACKEND": "redis+cluster://c:7000/"})
    with pytest.raises(SettingsError, match=r"TANDEM_BROKER_URL=.*Celery's broker has no cluster mode"):
        Settings.from_env({"TANDEM_BROKER_URL": "redis+cluster://c:7000/"})
    given = Settings.from_env(
        {
            "TANDEM_BROKER_URL": "amqp://mq//",
            "TANDEM_REDIS_URL": "redis+cluster://c:7000/",
            "TANDEM_RESULT_BACKEND": "redis://r:6379/2",
        }
    )
    assert given.result_backend == "redis://r:6379/2"


def test_plain_urls_keep_their_defaults() -> None:
    assert not is_cluster_url("redis://h:6379/0") and is_cluster_url("rediss+cluster://h:1/")
    settings = Settings.from_env({"TANDEM_REDIS_URL": "unix:///run/redis.sock?db=3"})
    assert settings.result_backend == "redis+socket:///run/redis.sock?db=3"
    assert masked("redis+cluster://u:pw@h:1,h:2/") == "redis+cluster://u:***@h:1,h:2/"
