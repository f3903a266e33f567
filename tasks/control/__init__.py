"""The control tasks, called by name from any Celery client (``tandem.decide``, ``tandem.answer``,
``tandem.message``, ``tandem.resume``, ``tandem.fork``, ``tandem.follow_up``), and the worker-side
records they need: approvals and the parking that waits for them, questions, owners, threads and
a reply given once. The client's side of the same calls (``JobHandle.decide`` and the rest) is
``tandem.client``'s."""
