"""Whether an app has processed all its input, and whether its output is exactly right.

`verify_app` is what `sparkscale verify` runs: it reads every produced record back from the input
streams, asks the workload what its sink must then hold (a direct computation over the input),
and compares that with what the sink holds. Run it once the app is drained (`drained`).
"""

from __future__ import annotations

import redis

from sparkscale.config import AppConfig, Config
from sparkscale.config.identities import OPERATOR
from sparkscale.protocol.sinks import SinkTarget
from sparkscale.protocol.streams import live_backlog
from sparkscale.redisconn import connect_as
from sparkscale_lab.pipelines.verify import VerifyResult, compare_keyed, read_input_records, read_keyed_sink
from sparkscale_lab.pipelines.workloads import workload


def unprocessed_records(client: redis.Redis, cfg: Config, app: AppConfig) -> int:
    """Input entries the app's query has not finished processing (all of them if it never ran).

    Measured from the end of the last finished batch, not from the source's committed offsets:
    Spark commits a batch to the source only when it plans the next one."""
    query = workload(app.pipeline).query
    return sum(live_backlog(client, cfg.redis.key_prefix, app.name, query, app.source_partitions))


def drained(client: redis.Redis, cfg: Config, app: AppConfig) -> bool:
    return unprocessed_records(client, cfg, app) == 0


def verify_app(cfg: Config, app_name: str) -> VerifyResult:
    app = cfg.app(app_name)
    work = workload(app.pipeline)
    client = connect_as(cfg, OPERATOR)
    try:
        produced = read_input_records(client, cfg.redis.key_prefix, app.name)
        records = ({**r.fields, "uid": r.uid or ""} for r in produced)
        expected = work.expected_output(records, app)
        target = SinkTarget(app=app.name, query=work.query, host=cfg.redis.host, port=cfg.redis.port,
                            db=cfg.redis.db, prefix=cfg.redis.key_prefix)
        actual = read_keyed_sink(client, target)
    finally:
        client.close()
    return compare_keyed(expected, actual)
