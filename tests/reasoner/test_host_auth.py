"""``host_auth``: a model host's URL may carry HTTP Basic credentials or the role may have an API
key, not both (one ``Authorization`` header); the refusal of LiteLLM's path to send a URL's
credentials is said at once, naming the setting, never retried."""

from __future__ import annotations

import pytest

from tandem.reasoner.errors import ModelCallError, TransientModelError
from tandem.reasoner.host_auth import both_credentials, url_has_credentials
from tandem.reasoner.models.litellm_errors import translate


@pytest.mark.parametrize(
    ("url", "has"),
    [
        ("http://user:pw@gpu-1:8000/v1", True),
        ("https://sk-token@gpu-1/v1", True),
        ("http://user:@gpu-1", True),
        ("http://gpu-1:8000/v1", False),
        ("http://gpu-1:8000/v1?next=a@b", False),  # an @ past the host is not a user part
        ("http://[::1", False),  # not a URL urllib reads
    ],
)
def test_a_user_part_is_found_in_the_host_only(url: str, has: bool) -> None:
    assert url_has_credentials(url) is has


def test_both_credentials_need_a_key_and_a_user_part() -> None:
    assert both_credentials("http://u:p@h/v1", "sk-1")
    assert not both_credentials("http://u:p@h/v1", None)
    assert not both_credentials("http://h/v1", "sk-1")
    assert not both_credentials(None, "sk-1")


def test_litellms_refusal_of_the_urls_credentials_fails_at_once_naming_the_setting() -> None:
    class InternalServerError(Exception):  # how LiteLLM hands on aiohttp's ValueError
        status_code = 500

    said = "Cannot combine AUTHORIZATION header with AUTH argument or credentials encoded in URL"
    error = translate(
        InternalServerError(said),
        attempts=1,
        model="hosted_vllm/m",
        api_base="http://ops:s3cret@gpu-1:8000/v1",
        role="actor",
    )
    assert isinstance(error, ModelCallError) and not isinstance(error, TransientModelError)
    assert "TANDEM_ACTOR_API_BASE (api_base=) holds a user and password" in str(error)
    assert "s3cret" not in str(error)
