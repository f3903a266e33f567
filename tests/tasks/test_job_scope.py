"""A job's secret scope is entered where its records are written, and only there
(``tandem.tasks.steps.context.enter_job_scope``; issue 25, item 3)."""

from __future__ import annotations

import contextvars

from cryptography.fernet import Fernet

from tandem.broker_config import Settings
from tandem.tasks.runtime import Runtime
from tandem.tasks.spec import JobSpec
from tandem.tasks.steps.context import enter_job_scope
from tandem.toolkit.redaction import MASK, SecretScope, current_scope, enter_scope, redact


def runtime() -> Runtime:
    return Runtime(Settings.from_env({"TANDEM_SECRETS_KEY": Fernet.generate_key().decode()}))


def test_the_scope_of_a_sealed_spec_masks_its_secrets_in_its_own_context_only() -> None:
    rt = runtime()
    spec = rt.secret_box.seal_spec(JobSpec(goal="g", secrets={"tok": "scoped-token-77"}))

    def in_job() -> tuple[str | None, str]:
        enter_job_scope(rt, "job-1", spec)
        scope = current_scope()
        return (scope.job_id if scope else None), redact("saw scoped-token-77")

    assert contextvars.copy_context().run(in_job) == ("job-1", f"saw {MASK}")
    assert current_scope() is None and redact("saw scoped-token-77") == "saw scoped-token-77"


def test_another_jobs_scope_is_replaced_and_the_same_jobs_kept() -> None:
    rt = runtime()
    spec = rt.secret_box.seal_spec(JobSpec(goal="g", secrets={"tok": "second-token-88"}))
    kept = SecretScope.of("job-2", ["second-token-88"])

    def run() -> tuple[bool, str | None]:
        enter_scope(kept)
        enter_job_scope(rt, "job-2", spec)  # already this job's: kept as it is
        same = current_scope() is kept
        enter_scope(SecretScope.of("job-1", ["first-token-11"]))
        enter_job_scope(rt, "job-2", spec)
        scope = current_scope()
        return same, scope.job_id if scope else None

    assert contextvars.copy_context().run(run) == (True, "job-2")


def test_a_spec_without_secrets_or_with_a_foreign_key_enters_no_values() -> None:
    rt = runtime()
    foreign = Runtime(Settings.from_env({"TANDEM_SECRETS_KEY": Fernet.generate_key().decode()}))
    spec = foreign.secret_box.seal_spec(JobSpec(goal="g", secrets={"tok": "foreign-token-99"}))

    def run() -> tuple[int, int]:
        enter_job_scope(rt, "job-3", JobSpec(goal="g"))
        none = current_scope()
        enter_job_scope(rt, "job-3", spec)  # cannot be unsealed here: an empty scope, no error
        scope = current_scope()
        return (0 if none is None else 1), len(scope.index.ordered) if scope else -1

    assert contextvars.copy_context().run(run) == (0, 0)
