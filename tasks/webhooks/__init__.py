"""Job webhooks: ``JobSpec.webhooks`` names URLs told of a job's end (``final``) and of its pauses for
a person (``waiting_for_person``), each delivery a signed JSON POST retried with back-off.

- ``targets``: the ``Webhook`` entry of a spec and where deliveries may go (loopback unless the
  operator allows more: ``TANDEM_WEBHOOK_ALLOWED_HOSTS``);
- ``signing``: the ``Tandem-Signature`` header, and its check for receivers;
- ``outbox``: the deliveries of a job in Redis (a durable, idempotent unit each) and the index the
  sweeper reads;
- ``delivery``: the ``tandem.webhook`` task that posts one delivery, what starts deliveries when a
  job parks or ends, and the sweeper that sends again what a lost worker left.
"""
