"""The lab's commands, plug-ins of the `sparkscale` command (entry-point group `sparkscale.commands`,
pyproject.toml): bench, report and demo (bench.py), loadgen and verify (pipelines.py), simulate."""
