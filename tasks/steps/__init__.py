"""The Celery tasks of a job: thin wake-ups of the state machine (``tandem.tasks.state.machine``).

``tandem.infer`` (intake, ``intake``) creates the job's record at its first step and sends that
step. Every other task names a step, ``(job, round)`` plus its kind by the task's name:
``thinker_turn``, ``actor_turn`` (the model of mono and react jobs too; ``model``), ``run_tool``
(one call of a ``tools`` step) and ``collect_tools`` (``tools``), ``finalize``. A task claims its
step (nothing happens if the job is elsewhere, ended, or a live worker holds the step), loads its
``StepContext`` once (``context``), does the step's work, asks the job's plan
(``tandem.reasoner.loop``) what follows, commits (stores the step's messages and moves the record to
the next step, only if its claim still stands) and sends the outbox (``guard``, ``dispatch``). Two
steps need no other worker and run at once in the thread that made them current, their message kept
in the outbox for the reconciler until they commit: ``collect`` (run by the call that stores a
round's last result) and ``finalize``.

So a duplicated, stale, forged or wrong-round message does nothing, a lost one is sent again by
the reconciler (``tandem.tasks.state.reconciler``), and a worker that lost its lease stores nothing.
Transient failures (a model host's 429/5xx/time-out, Redis or broker errors) park the step in
``waiting`` and send it again after a back-off, until the job's deadline.
"""
