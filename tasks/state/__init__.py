"""A job's durable state in Redis: its keys, the state machine and its Lua scripts, the store of
everything else a job writes, leases, the reconciler, reopening, the writes a step holds until it
commits, and the job's end (result and Celery result)."""
