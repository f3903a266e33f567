"""Breaking tests of ``tandem.Client`` and ``tandem.AsyncClient``, written from docs/api.md ("From
Python over HTTP") and the README's client examples alone.

Every client here is built as the docs build it, from a URL and a token, and talks to a real
``tandem api`` process over real sockets, with real ``celery worker`` processes behind it. Most
tests run once per client (``side``: ``sync`` and ``async``) through one driver, ``world.Side``.

Four modules, each on a world (workers and an API) of its own, so they run side by side on
separate test processes: ``test_breaking_methods`` (every method, the API's refusals, base URLs, a
client-only install), ``test_breaking_writes`` (each answer a proxy gives raises its class, a
write is sent once), ``test_breaking_reads`` (reads ride out a blip) and ``test_breaking_streams``
(event streams that drop, stall or lose their API; many streams on one client; a busy API).
Beside them: ``conftest`` (the fixtures), ``world`` (API processes, tokens, plans, the driver),
``faults`` (what faults are put on), ``fault_proxy`` (the proxy that puts them on), ``tasks``
(many asyncio tasks on one client), ``install`` (a client-only virtual environment).
"""
