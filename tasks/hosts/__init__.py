"""The model hosts as a fleet shares them: capacity slots, rate buckets, the host model that
waits for them, the in-process loop that runs model calls, and a job's budgets and priority."""
