"""The Celery tasks that run a job's steps: the messages that wake them, the guard around each
step (claim, commit, reschedule, finish) and the tasks themselves."""
