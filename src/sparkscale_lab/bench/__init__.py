"""Benchmarks, report and demo: sparkscale's controllers measured against Spark's own dynamic
allocation and static provisioning on the embedded environment (`sparkscale bench`, `report`, `demo`).

Layout, one job per module: `environment` (a fresh embedded environment per run), `timeline` (what
is sampled during a run), `measures` (pure maths over a run's samples), `scaling` and `migration`
(the two benchmarks), `plots` (matplotlib), `report` (tables and plots from saved results), `demo`.
For an operator's own, unmodified job (the fixture tests/fixtures/clickstream.py): `filefeed` lands
its input files at a load profile's rate, `clickcheck` computes what it must output and verifies it,
and `userjob` (pure parts: `userjob_tables`) measures its migrations and the daemon's cycle on it.
"""
