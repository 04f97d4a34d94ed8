"""The lab's commands, plug-ins of the `sparkscale` command (entry-point group `sparkscale.commands`,
pyproject.toml): bench, report and demo (bench.py), loadgen and verify (pipelines.py), simulate."""

import importlib.util

# The lab's commands draw their figures with matplotlib, which only the `lab` extra installs: say so
# when one is loaded (the product's plug-in loader turns this into "pip install 'sparkscale[lab]'"),
# not at the end of a five-minute run.
if importlib.util.find_spec("matplotlib") is None:
    raise ImportError("the lab's commands need matplotlib, which the `lab` extra installs")
