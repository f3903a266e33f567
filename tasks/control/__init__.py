"""What a person or a client does to a running job: approvals and the parking that waits for
them, decisions, resume and fork, and steps waiting for model-host capacity."""
