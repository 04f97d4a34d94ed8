"""The control agent: the daemon's hands inside a managed pipeline's driver.

The daemon cannot change a running Spark application from outside: executor counts, graceful
decommissioning, stopping a query at a batch boundary and migrating its state to another partition
count (stop, offline repartition, restart) are driver-side calls. The agent watches the
application's command znodes (docs/internals.md), carries each command out once, in order, and
acks it; it also publishes every query's progress to Redis, since Spark's REST API has none.

Driver-side only (it imports PySpark); the daemon talks to it through `sparkscale.protocol` and
never imports this package. `loop` follows the commands, `admission` runs only fresh ones from the
live leader lock holder (fencing), `queries`,
`executors` and `checkpoint` carry them out, `progress` and `sources` publish each query's progress
and backlog, `hooks` keeps how the user's code started each query, `attach` starts it all, and
`bootstrap` is the driver's main program that runs the user's script.
"""

from sparkscale.agent.args import CommandRefused
from sparkscale.agent.executors import ExecutorView, SparkExecutors
from sparkscale.agent.loop import ControlAgent
from sparkscale.agent.progress import ProgressPublisher, progress_fields
from sparkscale.agent.queries import SHUFFLE_PARTITIONS_CONF

__all__ = [
    "SHUFFLE_PARTITIONS_CONF",
    "CommandRefused",
    "ControlAgent",
    "ExecutorView",
    "ProgressPublisher",
    "SparkExecutors",
    "progress_fields",
]
