"""How a request to a model host authenticates: the user part of its URL or an API key, not both.

An HTTP request has one ``Authorization`` header. A host URL with a user part
(``http://user:pw@gpu-1:8000/v1``, or ``http://token@gpu-1``) is sent as HTTP Basic
authentication; an API key as ``Bearer <key>``. Given both, the direct path (aiohttp) refused every
call (``Cannot combine AUTHORIZATION header with AUTH argument or credentials encoded in URL``) and
LiteLLM's (httpx) sent the URL's credentials and dropped the key without a word. So the two together
are refused where they are configured (``TANDEM_<ROLE>_API_BASE`` with ``TANDEM_<ROLE>_API_KEY``,
or ``api_base`` with ``api_key``), before any call. A leaf module: the settings read it without
loading a model service.
"""

from __future__ import annotations

from urllib.parse import urlsplit

__all__ = ["api_base_refusal", "both_credentials", "url_has_credentials"]


def url_has_credentials(url: str) -> bool:
    """Whether ``url`` carries a user part (``user:password@`` or ``user@``)."""
    try:
        return "@" in urlsplit(url).netloc
    except ValueError:
        return False


def both_credentials(api_base: str | None, api_key: str | None) -> bool:
    """Whether a host would be given two credentials: an ``api_key`` and a user part in
    ``api_base``."""
    return bool(api_base and api_key and url_has_credentials(api_base))


def api_base_refusal(api_base: str | None, api_key: str | None, base: str, key: str) -> str | None:
    """Why ``api_base`` (the setting or argument named ``base``) is refused: not an http(s) URL,
    or a user part beside ``api_key`` (named ``key``); ``None`` when it is fine. The URL is shown
    with its password masked."""
    if not api_base:
        return None
    from tandem.toolkit.redaction import masked_url  # (lazily: the toolkit takes 0.5 s)

    if not api_base.startswith(("http://", "https://")):
        return f"{base}={masked_url(api_base)!r} must be an http:// or https:// URL"
    if not both_credentials(api_base, api_key):
        return None
    return (
        f"{base}={masked_url(api_base)!r} holds a user and password, and {key} is set too: a request "
        "has one Authorization header (HTTP Basic for the URL's credentials, Bearer for the key); keep "
        f"one, {key} or the URL's user:password (docs/model-hosts.md)"
    )
