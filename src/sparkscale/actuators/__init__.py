"""Actuators: carry a plan out on running pipelines (executor scaling, migrations)."""
