"""Jobs on workers and approval: a job's Task carries its approval settings, so calls that need a
decision park the job (``tandem.tasks.control.parking``) instead of running unreviewed."""

from __future__ import annotations

from tandem.broker_config.settings import Settings
from tandem.tasks.runtime import Runtime
from tandem.tasks.spec import JobSpec


def test_a_jobs_task_carries_its_approval_settings() -> None:
    runtime = Runtime(Settings.from_env({}))
    task = runtime.task_for("job-1", JobSpec(goal="g", approve_tools=["send_email"], approval_timeout_s=30))
    assert (task.approve_tools, task.approval_timeout_s) == (["send_email"], 30)
    task = runtime.task_for("job-2", JobSpec(goal="g"))
    assert (task.approve_tools, task.approval_timeout_s) == ([], None)
