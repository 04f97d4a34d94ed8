"""The operator's requests to an app's leader and its answers, as znodes (protocol/znodes.py):
`<root>/apps/<app>/requests/req-NNNNNNNNNN`, answered at `<root>/apps/<app>/request_results/<same
name>` (the records are model/manual_request.py; daemon/manual.py serves them).

A request znode that does not parse (bad JSON, NaN or Infinity, not an object, a field wrong) is
answered "not a valid request" and removed, logged once (store/bad_records.py); an answer that does
not parse is read as a refusal saying so.

The leader asks for the pending requests every cycle: the list of request znodes is kept from the
last read while a watch vouches for it (store/zk_watch.py), so a cycle with no request asks ZooKeeper
nothing. The wake-up watch (`watch`) drops the kept list before it wakes the leader.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from sparkscale.model.manual_request import RESULT_JSON, ManualRequest, ManualResult
from sparkscale.protocol.commands import wait_for_znode
from sparkscale.protocol.znodes import requests_path, results_path
from sparkscale.store.bad_records import PROBLEMS, BadRecords, describe, load_json
from sparkscale.store.zk_watch import Watcher, forget, read_existing, watched

REQUEST_PREFIX = "req-"
INVALID = "not a valid request"


def parse_request(name: str, data: bytes) -> ManualRequest:
    """A request znode's record (NaN and Infinity refused); raises one of bad_records.PROBLEMS."""
    return ManualRequest.from_object(name, load_json(data))


class ZkRequests:
    def __init__(self, zk: KazooClient, root: str) -> None:
        self.zk = zk
        self.root = root
        self.bad = BadRecords()

    def submit(self, app: str, request: ManualRequest) -> str:
        self.zk.ensure_path(results_path(self.root, app))
        path = str(self.zk.create(f"{requests_path(self.root, app)}/{REQUEST_PREFIX}", request.to_json(),
                                  sequence=True, makepath=True))
        forget(self.zk, requests_path(self.root, app))  # this process changed the list: read it again
        return path.rsplit("/", 1)[1]

    def wait_result(self, app: str, name: str, timeout_s: float) -> ManualResult | None:
        data = wait_for_znode(self.zk, f"{results_path(self.root, app)}/{name}", timeout_s)
        if data is not None:
            try:
                return RESULT_JSON.load(load_json(data))
            except PROBLEMS as exc:
                self.bad.skip(results_path(self.root, app), name, exc)
                return ManualResult(False, f"the leader's answer does not parse: {describe(exc)}")
        with contextlib.suppress(NoNodeError):
            self.zk.delete(f"{requests_path(self.root, app)}/{name}")
        forget(self.zk, requests_path(self.root, app))
        return None

    def pending(self, app: str) -> list[ManualRequest]:
        path = requests_path(self.root, app)

        def listed(watcher: Watcher) -> list[str]:
            return sorted(read_existing(self.zk, self.zk.get_children, path, watcher) or [])  # none: no request yet

        out = []
        for name in watched(self.zk, path, listed).get():
            try:
                data, _stat = self.zk.get(f"{path}/{name}")
            except NoNodeError:
                continue
            try:
                out.append(parse_request(name, data))
            except PROBLEMS as exc:
                self.bad.skip(path, name, exc)
                self.answer(app, name, ManualResult(False, INVALID))
        return out

    def answer(self, app: str, name: str, result: ManualResult) -> None:
        """Write the result, then remove the request (a crash in between answers twice at worst: the
        result exists, so the second write is skipped)."""
        with contextlib.suppress(NodeExistsError):
            self.zk.create(f"{results_path(self.root, app)}/{name}", result.to_json(), makepath=True)
        with contextlib.suppress(NoNodeError):
            self.zk.delete(f"{requests_path(self.root, app)}/{name}")
        forget(self.zk, requests_path(self.root, app))

    def watch(self, app: str, on_request: Callable[[], object]) -> None:
        """Call `on_request()` whenever the request list changes (kazoo ChildrenWatch, kept for life)."""
        path = requests_path(self.root, app)
        self.zk.ensure_path(path)

        def changed(children: list[str]) -> bool:
            if children:
                forget(self.zk, path)  # the cycle it wakes lists them again, whichever watch kazoo ran first
                on_request()
            return True

        self.zk.ChildrenWatch(path, changed)
