"""A managed app's first launch: Spark's allocation manager is on at the start only, so that the
standalone master launches `initial_executors` rather than up to spark.cores.max (which the agent
then trimmed); the `spark-dra` baseline keeps the manager running; the operator's own setting wins."""

from __future__ import annotations

from sparkscale.apps.submit import START_ONLY_TIMEOUT, spark_conf
from sparkscale.config import Config


def test_sparkscale_sized_apps_start_at_their_initial_executors():
    cfg = Config()
    app = cfg.apps[0].model_copy(update={"initial_executors": 2, "max_executors": 6})
    conf = spark_conf(cfg, app)
    assert conf["spark.dynamicAllocation.enabled"] == "true"
    assert conf["spark.dynamicAllocation.initialExecutors"] == "2"
    assert conf["spark.dynamicAllocation.minExecutors"] == "0"
    assert conf["spark.dynamicAllocation.maxExecutors"] == "7"  # the headroom of spark.cores.max
    # Until the agent stops it, the manager removes nothing and asks for nothing.
    assert conf["spark.dynamicAllocation.executorIdleTimeout"] == START_ONLY_TIMEOUT
    assert conf["spark.dynamicAllocation.schedulerBacklogTimeout"] == START_ONLY_TIMEOUT
    assert conf["spark.dynamicAllocation.shuffleTracking.enabled"] == "true"  # passes Spark's check without
    # decommissioning


def test_the_dynamic_allocation_baseline_keeps_its_own_settings():
    cfg = Config()
    app = cfg.apps[0].model_copy(update={
        "dynamic_allocation": cfg.apps[0].dynamic_allocation.model_copy(update={"enabled": True})})
    conf = spark_conf(cfg, app)
    assert conf["spark.dynamicAllocation.minExecutors"] == str(app.min_executors)
    assert conf["spark.dynamicAllocation.executorIdleTimeout"] != START_ONLY_TIMEOUT


def test_the_operators_own_setting_wins():
    cfg = Config()
    app = cfg.apps[0].model_copy(update={"spark_conf": {"spark.dynamicAllocation.enabled": "false"}})
    assert spark_conf(cfg, app)["spark.dynamicAllocation.enabled"] == "false"
