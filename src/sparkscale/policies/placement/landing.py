"""Where the standalone master will put an app's next executor. Pure.

An app cannot choose the worker of a new executor on a standalone cluster: the driver's host hints
are dropped before the master sees them (docs/internals.md, "Placement"). The master's choice is
deterministic, though (`Master.startExecutorsOnWorkers`, Spark 4.3.0): of the ALIVE workers with
enough free cores and memory for one executor of the app's shape, sorted by
`spark.deploy.workerSelectionPolicy`, the first one. With CORES_FREE_DESC (the default) that is the
worker with the most free cores, a tie going to the largest worker id (the policy sorts ascending by
(free cores, id) and reverses); the *_ASC policies and WORKER_ID break ties by the smallest id. So
a placement policy may only plan an addition on the predicted worker.
"""

from __future__ import annotations

from collections.abc import Iterable

from sparkscale.policies.placement.model import Worker

SELECTION_POLICIES = ("CORES_FREE_DESC", "CORES_FREE_ASC", "MEMORY_FREE_DESC", "MEMORY_FREE_ASC", "WORKER_ID")


def landing_worker(workers: Iterable[Worker], cores: int, memory_mb: int,
                   policy: str = "CORES_FREE_DESC") -> str | None:
    """The id of the worker the master launches the next executor of this shape on; None: none has room."""
    policy = policy.upper()
    if policy not in SELECTION_POLICIES:
        raise ValueError(f"unknown spark.deploy.workerSelectionPolicy {policy!r} "
                         f"(one of {', '.join(SELECTION_POLICIES)})")
    usable = [w for w in workers if w.cores_free >= cores and w.memory_free_mb >= memory_mb]
    if not usable:
        return None
    if policy == "WORKER_ID":
        return min(usable, key=lambda w: w.id).id
    key = (lambda w: (w.cores_free, w.id)) if policy.startswith("CORES") else (lambda w: (w.memory_free_mb, w.id))
    ordered = sorted(usable, key=key)
    return (ordered[-1] if policy.endswith("DESC") else ordered[0]).id
