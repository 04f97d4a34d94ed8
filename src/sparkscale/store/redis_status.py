"""Each daemon's last view of each app (hash `<prefix><app>:status`, protocol/keys.py: one field per
daemon identity, its AppStatus as JSON, model/app_status.py). A view that does not parse is
skipped, logged once (store/bad_records.py): `sparkscale status` shows the others."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import cast

import redis

from sparkscale.model.app_status import APP_STATUS_JSON, AppStatus
from sparkscale.protocol.keys import status_key
from sparkscale.store.bad_records import PROBLEMS, BadRecords, load_json
from sparkscale.store.redis_action_log import Hash, text


@dataclass
class RedisStatus:
    client: redis.Redis
    prefix: str
    bad: BadRecords = field(default_factory=BadRecords)

    def publish(self, app: str, status: AppStatus) -> None:
        self.client.hset(status_key(self.prefix, app), status.daemon, json.dumps(status.to_dict()))

    def read(self, app: str) -> list[AppStatus]:
        key = status_key(self.prefix, app)
        views: list[AppStatus] = []
        for daemon, value in cast(Hash, self.client.hgetall(key) or {}).items():
            try:
                views.append(APP_STATUS_JSON.load(load_json(value)))
            except PROBLEMS as exc:
                self.bad.skip(key, text(daemon), exc)
        return sorted(views, key=lambda s: s.cycle_at, reverse=True)
