"""``tandem api``: the HTTP API (jobs, server-sent events) and the job console at ``/``."""

from tandem.workers.api.app import Api, create_api

__all__ = ["Api", "create_api"]
