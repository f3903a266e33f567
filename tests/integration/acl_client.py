"""A connection as the client ACL user of docs/security.md, on the shared test Redis: its
``ACL SETUSER`` line as the page gives it, under a name of the caller's own (the ``default`` user
stays on), deleted on the way out. For breaking tests of what that user may write."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from redis import Redis

from tests.integration.conftest import Cluster
from tests.integration.test_redis_acl import acl_lines


@contextmanager
def client_user(c: Cluster) -> Iterator[Redis]:
    """A Redis client of ``c``'s database as the documented client user."""
    [line] = [x for x in acl_lines() if x.split()[2] == "tandem-client"]
    name = f"tandem-client-break-{uuid.uuid4().hex[:8]}"
    args = line.split()[3:]
    password = next(a[1:] for a in args if a.startswith(">"))
    c.redis.execute_command("ACL", "SETUSER", name, *args)
    client = Redis.from_url(c.url.replace("redis://", f"redis://{name}:{password}@"))
    try:
        yield client
    finally:
        client.close()
        c.redis.execute_command("ACL", "DELUSER", name)
