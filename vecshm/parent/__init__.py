"""The parent's side of the engine: the plan, commands and tickets, waits, the failure policy,
results, and async batches."""
