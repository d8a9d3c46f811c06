"""The command core: the run object every facade calls, the engine, async batches, waits and restarts."""
