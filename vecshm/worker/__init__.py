"""The worker process: its main loop, the env runner that writes results into the segment, and its guard."""
