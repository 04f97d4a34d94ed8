"""The control loop of the managed applications, built the way Flink's Kubernetes autoscaler is
(flink-autoscaler: collector, evaluator, executor, realizer and event handler, each one class with
one job, injected into one `JobAutoScalerImpl`).

`autoscaler.Autoscaler` runs one cycle of one app as collect -> decide -> act -> record, calling
collaborators it receives and never builds: a snapshot collector (collect.py), the planner and the
cluster's placement (decide.py), an outcome judge (judge.py), an executor of actions and the
operator's request desk (act.py), the stores it reads and writes (stores.py), each app's leader
lock (leadership.py), a clock (clock.py), and one event sink (sink.py) that takes its typed events
(events.py; a decision is decision.py's `Decision`).

This package depends on no part of the daemon: the daemon process (sparkscale.daemon.service)
builds the live collaborators over Redis and ZooKeeper (daemon/wiring.py) and the sink's feeds
(daemon/feeds.py: the log, the action log, the metrics, the status) once, and hands them in.
Its `__init__` imports nothing, so that importing one module never pulls in the autoscaler.
"""
