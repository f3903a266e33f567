"""Who calls the API and what they may do: each request's ``ApiToken`` (tenant and scopes).

``BearerAuth`` (``tandem.workers.api.guards``) resolves the bearer token and leaves it in the
request's state; the handlers ask ``caller(request, scope)`` for it, and ``check_owner`` before
they touch a job:

* a token without the scope an action needs: 403 ``missing_scope``, naming the scope;
* another tenant's job: 404 ``unknown_job``, word for word the answer for a job that does not
  exist, so a token learns nothing of other tenants' jobs (an ``admin`` token sees every tenant).

Without tokens (``tandem api`` on a loopback address only) every request acts as ``ANONYMOUS``:
the ``default`` tenant, every scope, ``admin`` included (one operator on their own machine).
"""

from __future__ import annotations

from starlette.requests import Request

from tandem.broker_config.tokens import DEFAULT_TENANT, SCOPES, ApiToken
from tandem.tasks.control.owners import no_such_job
from tandem.workers.api.errors import ApiError

ANONYMOUS = ApiToken("", DEFAULT_TENANT, frozenset(SCOPES))
"""Every request's caller when the API has no tokens (loopback only)."""

_ACTIONS = {
    "submit": "submit jobs",
    "read": "read jobs (status, events, list)",
    "control": "cancel, resume or fork jobs",
    "approve": "decide on calls awaiting approval",
    "admin": "act on every tenant's jobs",
}


def whoami(request: Request) -> ApiToken:
    """The request's token (``ANONYMOUS`` for an API without tokens)."""
    token: ApiToken = getattr(request.state, "token", ANONYMOUS)
    return token


def caller(request: Request, scope: str) -> ApiToken:
    """The request's token, once it is known to hold ``scope``; 403 ``missing_scope`` otherwise."""
    token = whoami(request)
    if not token.allows(scope):
        held = ", ".join(sorted(token.scopes)) or "none"
        raise ApiError(
            403,
            "missing_scope",
            f"this token (tenant {token.tenant!r}) lacks the scope {scope!r}, needed to "
            f"{_ACTIONS[scope]}; it holds: {held}. Ask the operator for a token with {scope!r} "
            "(TANDEM_API_TOKENS, see docs/security.md)",
            scope=scope,
        )
    return token


def unknown_job(job_id: str) -> ApiError:
    """The 404 of a job a token may not see, the same as for a job that does not exist, in the
    words the control tasks refuse both with (``tandem.tasks.control.owners.no_such_job``)."""
    return ApiError(404, "unknown_job", no_such_job(job_id))


def check_owner(token: ApiToken, job_id: str, owner: str) -> None:
    """404 ``unknown_job`` unless ``token`` may see the jobs of tenant ``owner``."""
    if not token.admin and owner != token.tenant:
        raise unknown_job(job_id)


def may_see(token: ApiToken, owner: str) -> bool:
    """True when ``token`` may see the jobs of tenant ``owner`` (its own; every tenant's for admin)."""
    return token.admin or owner == token.tenant


__all__ = ["ANONYMOUS", "caller", "check_owner", "may_see", "unknown_job", "whoami"]
