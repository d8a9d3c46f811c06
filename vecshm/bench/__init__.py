"""The benchmark suite: ``python -m vecshm.bench`` (see ``vecshm.bench.cli``)."""
