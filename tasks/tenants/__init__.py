"""Tenants' fair share and quotas (``TANDEM_TENANTS``, ``TANDEM_MAX_RUNNING_JOBS``; docs/tenants.md).

- ``queue``: who may start a job now; per-tenant waiting lists and the weighted fair pick (Redis).
- ``usage``: the tokens and cost of each tenant's jobs per UTC day, and the quota refusal.
- ``gate``: what intake, a job's end and a worker's sweep do with them (hold, admit, start).
"""
