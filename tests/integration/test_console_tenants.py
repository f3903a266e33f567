"""The job console in headless Chromium with tenants' tokens: it asks for a token, shows whom the
token acts for, lists that tenant's jobs only, and signs out to take another token."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from tests.integration.cdp import Browser, Page
from tests.integration.conftest import _make_cluster
from tests.integration.test_api import ApiProcess
from tests.integration.test_console_browser import chromium

pytestmark = pytest.mark.integration
__all__ = ["chromium"]  # the fixture, used by name

A, B = "console-token-of-team-a-0123", "console-token-of-team-b-0123"
LISTED = "Array.from(document.querySelectorAll('#jobs li[data-id]')).map(n => n.dataset.id).join(',')"


@pytest.fixture
def tenant_api(redis_base: str) -> Iterator[tuple[ApiProcess, dict[str, str]]]:
    """``tandem api`` with two tenants' tokens and one queued job of each (no worker needed)."""
    tokens = {A: {"tenant": "team-a"}, B: {"tenant": "team-b"}}
    gen = _make_cluster(redis_base, TANDEM_API_TOKENS=json.dumps(tokens), TANDEM_TOOLKIT="")
    cluster, _, _ = next(gen)
    server = ApiProcess(cluster.env)
    jobs = {}
    try:
        for name, token in (("a", A), ("b", B)):
            created = httpx.post(
                f"{server.url}/v1/jobs",
                json={"goal": f"the job of team {name}"},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert created.status_code == 202, created.text
            jobs[name] = created.json()["id"]
        yield server, jobs
    finally:
        server.stop()
        gen.close()


def sign_in(page: Page, token: str) -> None:
    page.wait_for("!document.querySelector('#token-form').hidden", 30)
    page.evaluate(
        f"document.querySelector('#token').value = {json.dumps(token)};"
        "document.querySelector('#token-form').requestSubmit(); true"
    )


def test_the_console_signs_in_with_a_token_and_lists_its_tenants_jobs_only(
    chromium: str, tenant_api: tuple[ApiProcess, dict[str, str]]
) -> None:
    server, jobs = tenant_api
    browser = Browser(f"{server.url}/", chromium)
    try:
        page = browser.page()
        page.wait_for("document.readyState === 'complete' && !!document.querySelector('#token-form')", 30)
        sign_in(page, A)
        page.wait_for(f"{LISTED} !== ''", 30)
        assert page.evaluate(LISTED) == jobs["a"]
        who = page.wait_for(
            "document.querySelector('#who').hidden ? '' : document.querySelector('#tenant').textContent", 30
        )
        assert who.startswith("tenant team-a") and "admin" not in who

        page.evaluate("document.querySelector('#sign-out').click(); true")
        assert page.evaluate(LISTED) == "" and page.evaluate("localStorage.getItem('tandem.token')") is None
        sign_in(page, B)
        page.wait_for(f"{LISTED} === {json.dumps(jobs['b'])}", 30)
        assert "team-b" in page.evaluate("document.querySelector('#tenant').textContent")
        page.close()
    finally:
        browser.close()
