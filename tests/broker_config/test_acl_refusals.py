"""``acl_refusals``: Redis's ``NOPERM`` and a refused password are told apart from an outage, even
when kombu re-raises them as its ``OperationalError``, and the line names the user and the ACL line
that grants what it lacks, never its password."""

from __future__ import annotations

import pytest
from kombu.exceptions import OperationalError
from redis.exceptions import AuthenticationError, NoPermissionError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError

from tandem.broker_config import Settings
from tandem.broker_config.acl_refusals import (
    ACL_DOCS,
    command_line,
    refusal,
    refused_detail,
    refused_error,
    user_of,
)

KEY_REFUSED = "this user has no permissions to access one of the keys used as arguments"


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        pytest.param(NoPermissionError(KEY_REFUSED), "permission", id="noperm"),
        pytest.param(AuthenticationError("invalid username-password pair"), "password", id="wrong-password"),
        pytest.param(ResponseError("WRONGPASS invalid username-password pair"), "password", id="wrongpass"),
        pytest.param(ResponseError("NOAUTH Authentication required."), "password", id="noauth"),
        pytest.param(ResponseError("WRONGTYPE Operation against a key"), None, id="another-error"),
        pytest.param(RedisConnectionError("Error 111 connecting"), None, id="an-outage"),
        pytest.param(None, None, id="nothing"),
    ],
)
def test_a_refusal_is_told_from_an_outage(exc: BaseException | None, kind: str | None) -> None:
    assert refusal(exc) == kind


def test_a_refusal_that_kombu_reraised_as_an_outage_is_found_behind_it() -> None:
    denied = NoPermissionError(
        f"Command # 2 (SADD _kombu.binding.thinker x) of pipeline caused error: {KEY_REFUSED}"
    )
    try:
        try:
            raise denied
        except NoPermissionError as exc:
            raise OperationalError(str(exc)) from exc
    except OperationalError as wrapped:
        assert refused_error(wrapped) is denied
    assert refused_error(OperationalError("Error 111")) is None
    looping = OperationalError("a")
    looping.__context__ = looping  # a chain that comes back on itself ends
    assert refused_error(looping) is None


@pytest.mark.parametrize(
    ("url", "user"),
    [
        ("redis://tandem-client:pw@redis:6379/0", "tandem-client"),
        ("redis://:pw@redis:6379/0", "default"),
        ("redis://redis:6379/0", "default"),
        ("rediss://team%2Fa:pw@redis:6380/0", "team/a"),
    ],
)
def test_the_user_of_a_url(url: str, user: str) -> None:
    assert user_of(url) == user


def test_the_detail_names_the_user_what_it_may_not_do_and_the_acl_line() -> None:
    url = "redis://tandem-client:s3cret@redis:6379/0"
    said = refused_detail(url, "read the queue depths", NoPermissionError(KEY_REFUSED))
    assert said == (
        f"user 'tandem-client' may not read the queue depths (NOPERM: {KEY_REFUSED}); give it the client "
        f"or the worker line of {ACL_DOCS}, which grant what tandem's commands and workers need"
    )
    said = refused_detail(url, "run PING", AuthenticationError("invalid username-password pair"))
    assert said.startswith("Redis refuses user 'tandem-client': invalid username-password pair; check ")
    assert "s3cret" not in said


def test_a_command_refused_while_it_ran_names_the_users_of_each_url() -> None:
    url = "redis://tandem-client:pw@r:6379/0"
    one = Settings.from_env({"TANDEM_REDIS_URL": url, "TANDEM_BROKER_URL": url})
    said = command_line(
        one, NoPermissionError("this user has no permissions to run the 'zcount' command"), "hosts"
    )
    assert said == (
        "Redis refuses user 'tandem-client' a command `tandem hosts` needs (NOPERM: this user has no "
        f"permissions to run the 'zcount' command): give the user the client line of {ACL_DOCS}, which "
        "grants every client command what it needs (workers need the worker line)"
    )
    two = Settings.from_env(
        {
            "TANDEM_REDIS_URL": "redis://store-user:pw@r:6379/0",
            "TANDEM_BROKER_URL": "redis://broker-user:pw@b:6379/0",
        }
    )
    said = command_line(two, NoPermissionError(KEY_REFUSED), "run")
    named = (
        "'store-user' (TANDEM_REDIS_URL), 'broker-user' (TANDEM_BROKER_URL), "
        "'store-user' (TANDEM_RESULT_BACKEND)"
    )
    assert f"Redis refuses users {named} a command `tandem run` needs" in said
    assert "pw@" not in said
