"""What a client call can fail with, by what the caller should do: fix the request (BadRequest, the
CLI's exit 2) or wait for the cluster (Unavailable, exit 1)."""

from __future__ import annotations


class ClientError(Exception):
    exit_code = 1


class BadRequest(ClientError):
    """The request cannot be carried out as given (an unknown app, query or migration; refused)."""

    exit_code = 2


class Unavailable(ClientError):
    """What the request needs does not answer (ZooKeeper, the leader, the app's REST API)."""

    exit_code = 1
