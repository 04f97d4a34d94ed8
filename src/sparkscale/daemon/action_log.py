"""The action log and the blocklist (Dhalion §4), as the daemon's modules name them: the records
are store/action_records.py's, the Redis implementations store/redis_action_log.py's."""

from __future__ import annotations

from sparkscale.store.action_records import (
    BLOCKLIST_ENTRY_JSON,
    DECISION_JSON,
    LOGGED_JSON,
    OUTCOME_JSON,
    BlocklistEntry,
    DecisionMode,
    DecisionRecord,
    Kind,
    LoggedDecision,
    Mode,
    OutcomeRecord,
    executed,
    past_decisions,
    snapshot_id,
)
from sparkscale.store.redis_action_log import RedisActionLog as ActionLog
from sparkscale.store.redis_action_log import RedisBlocklist as BlocklistStore

__all__ = ["BLOCKLIST_ENTRY_JSON", "DECISION_JSON", "LOGGED_JSON", "OUTCOME_JSON", "ActionLog", "BlocklistEntry",
           "BlocklistStore", "DecisionMode", "DecisionRecord", "Kind", "LoggedDecision", "Mode", "OutcomeRecord",
           "executed", "past_decisions", "snapshot_id"]
