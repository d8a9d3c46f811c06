"""The parent's side: the plan and options every part reads, and three packages: running the worker
processes (processes/), handing observations back (handback/) and the command core (core/)."""
