"""Jobs on workers and approval: nothing that needs a person's decision runs unreviewed."""

from __future__ import annotations

import pytest

from tandem.broker_config.settings import Settings
from tandem.tasks.errors import JobSpecError
from tandem.tasks.runtime import Runtime
from tandem.tasks.spec import JobSpec


def test_a_job_asking_for_approval_is_refused_on_workers() -> None:
    runtime = Runtime(Settings.from_env({}))
    with pytest.raises(JobSpecError, match=r"approve_tools=\['send_email'\].*cannot wait for approval yet"):
        runtime.task_for("job-1", JobSpec(goal="g", approve_tools=["send_email"]))
    task = runtime.task_for("job-2", JobSpec(goal="g"))
    assert task.approve_tools == []
