"""sparkscale's laboratory, beside the product (`pip install 'sparkscale[lab]'`): benchmarks, the
demo, the simulation, the chaos harness and its fault injection (bench/), the example pipelines,
their load generator and verifiers (pipelines/), and their commands (cli/, plug-ins of `sparkscale`).
It uses the product's public names; the product never imports it (tests/unit/test_layout.py)."""
