"""The vocabulary the head-node daemon and the in-driver agent share, and nothing else.

ZooKeeper paths (`znodes`), commands and acks with send, wait, expiry and retention (`commands`),
the live leader lock holder both sides fence with (`fencing`), every Redis key name
(`keys`), a sink's output keys (`sinks`: `SinkTarget`) and the small readers of the source's
positions (`streams`). No PySpark import: the daemon and the agent both depend on this package,
neither on the other.
"""
