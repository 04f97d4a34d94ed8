"""Policies: pure functions from a snapshot to a plan (DS2, Dhalion, threshold rules, placement)."""
