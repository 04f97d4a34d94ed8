"""A migration's journal in ZooKeeper (`R/apps/{app}/migration`, JSON; the record is
model/journal.py).

Writes are fenced: a compare-and-set on the version last read or written and, for a leader, in one
transaction with a check of its own lock znode, so a deposed leader cannot overwrite its successor's
journal (`WriteFenced`, logged as `migration.fenced`). A journal that does not parse is read as
none (logged once, store/bad_records.py): the next write replaces it.

`ZkJournals.watched` serves each app's journal from memory while a watch vouches for it
(store/zk_watch.py); every write here, fenced or not, makes the next watched read ask ZooKeeper.
"""

from __future__ import annotations

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)

from sparkscale.model.journal import Journal, JournalError
from sparkscale.protocol.fencing import LiveLock, read_live_lock, refusal
from sparkscale.protocol.znodes import app_path, journal_path
from sparkscale.store.bad_records import PROBLEMS, BadRecords
from sparkscale.store.zk_watch import Watcher, forget, read_existing, watched

log = structlog.get_logger("sparkscale.actuators.migration.journal")  # where `migration.fenced` always came from

ABSENT = -1  # the journal's version when there is none: the next write creates it

class WriteFenced(RuntimeError):
    """A journal write refused: the writer no longer holds the app's leader lock, or the journal
    changed since it read it (a successor took the migration over). Nothing was written."""


class ZkJournal:
    """The app's journal znode. With `epoch` (the writer leads at it) every write also checks, in the
    same ZooKeeper transaction, that the writer's own lock znode still exists."""

    def __init__(self, zk: KazooClient, root: str, app: str, epoch: int | None = None,
                 bad: BadRecords | None = None) -> None:
        self.zk = zk
        self.bad = bad or BadRecords()
        self.root = root
        self.app = app
        self.path = journal_path(root, app)
        self.epoch = epoch
        self.version: int | None = None  # of the journal last read or written here (ABSENT: none)
        self._lock: LiveLock | None = None

    def read(self, watcher: Watcher | None = None) -> Journal | None:
        """The journal (None: none); with `watcher`, set on the znode whether or not it exists."""
        got = read_existing(self.zk, self.zk.get, self.path, watcher)
        if got is None:
            self.version = ABSENT
            return None
        data, stat = got
        self.version = stat.version
        try:
            return Journal.from_json(data) if data else None
        except (JournalError, *PROBLEMS) as exc:  # a write replaces it (compare-and-set on its version)
            self.bad.skip(self.path, f"version {stat.version}", exc)
            return None

    def write(self, journal: Journal) -> None:
        """Compare-and-set the journal; raise WriteFenced (and log `migration.fenced`) instead of
        writing when the writer is no longer the leader or the journal changed under it."""
        if self.version is None:  # written before any read: from the version there is now
            stat = self.zk.exists(self.path)
            self.version = ABSENT if stat is None else stat.version
        try:
            self.version = self._cas(journal.to_json()) if self.epoch is None else self._transact(journal.to_json())
        except WriteFenced as exc:
            log.error("migration.fenced", app=self.app, id=journal.id, epoch=self.epoch, phase=journal.next,
                      status=journal.status, reason=str(exc), action="not written")
            raise
        finally:
            forget(self.zk, self.path)  # written, or changed by another: the next watched read asks

    def _cas(self, data: bytes) -> int:
        assert self.version is not None
        try:
            if self.version == ABSENT:
                self.zk.create(self.path, data, makepath=True)
                return 0
            return int(self.zk.set(self.path, data, version=self.version).version)
        except (BadVersionError, NodeExistsError, NoNodeError) as exc:
            raise WriteFenced(write_refusal(exc, self.version)) from None

    def _transact(self, data: bytes) -> int:
        assert self.version is not None and self.epoch is not None
        lock = self._own_lock()
        if self.version == ABSENT:
            self.zk.ensure_path(app_path(self.root, self.app))
        t = self.zk.transaction()
        t.check(lock.path, lock.version)
        if self.version == ABSENT:
            t.create(self.path, data)
        else:
            t.set_data(self.path, data, self.version)
        results = t.commit()
        reason = transaction_refusal(results, self.version, self.epoch)
        if reason is not None:
            raise WriteFenced(reason)
        return 0 if self.version == ABSENT else int(results[1].version)

    def _own_lock(self) -> LiveLock:
        """The lock znode the writer holds at `epoch`, found once (the transaction checks it after)."""
        if self._lock is None:
            assert self.epoch is not None
            live = read_live_lock(self.zk, self.root, self.app)
            session = self.zk.client_id[0] if self.zk.client_id else -1
            reason = refusal(self.epoch, self.epoch, live, session)
            if reason is not None:
                raise WriteFenced(f"journal write at epoch {self.epoch}: {reason}")
            self._lock = live
        assert self._lock is not None
        return self._lock


def write_refusal(exc: Exception, version: int) -> str:
    """Why a compare-and-set of the journal failed, from ZooKeeper's answer to its write."""
    if isinstance(exc, BadVersionError):
        return f"the journal changed since version {version} (another leader wrote it)"
    if isinstance(exc, NodeExistsError):
        return "a journal was created by another leader since this one read none"
    if isinstance(exc, NoNodeError):
        return f"the journal (version {version}) was deleted meanwhile"
    return f"journal write refused: {type(exc).__name__}"


def transaction_refusal(results: list[object], version: int, epoch: int) -> str | None:
    """Why a leader's journal transaction [check(own lock), write] failed (None: it committed).
    ZooKeeper answers every operation of a failed transaction: the failing one with its error, the
    others rolled back (or not run)."""
    failed = [(i, r) for i, r in enumerate(results)
              if isinstance(r, Exception) and not isinstance(r, (RolledBackError, RuntimeInconsistency))]
    if not failed:
        return None
    index, error = failed[0]
    if index == 0:
        return f"the writer's lock znode of epoch {epoch} is gone: no longer the leader"
    return write_refusal(error, version)


class ZkJournals:
    """Each app's journal under the ZooKeeper root; malformed ones logged once per daemon."""

    def __init__(self, zk: KazooClient, root: str) -> None:
        self.zk = zk
        self.root = root
        self.bad = BadRecords()

    @property
    def connected(self) -> bool:
        return bool(self.zk.connected)

    def journal(self, app: str, epoch: int | None = None) -> ZkJournal:
        return ZkJournal(self.zk, self.root, app, epoch, self.bad)

    def watched(self, app: str) -> Journal | None:
        """The app's journal, asked of ZooKeeper only when a watch no longer vouches for the last read."""
        return watched(self.zk, journal_path(self.root, app), self.journal(app).read).get()
