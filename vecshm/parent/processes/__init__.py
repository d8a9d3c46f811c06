"""Running the worker processes: starting, restarting and ending them, and the start method."""
