"""The Gymnasium facade: ``ShmVectorEnv``, its peer's rules, the custom-worker variant, and ``make_vec``."""
