"""The one API through which an operator changes a managed app: submit, stop, scale executors,
migrate, resume or abort a migration, list migrations. The `sparkscale` CLI is a thin layer over it
(parse, call, print) and tests use it the same way; the orchestration (through the leading daemon,
or under the app's leader lock when none leads) lives here, not in the commands.
"""

from sparkscale.client.api import Client
from sparkscale.client.errors import BadRequest, ClientError, Unavailable
from sparkscale.client.outcomes import MigrationOutcome, ScaleOutcome, Submitted

__all__ = ["BadRequest", "Client", "ClientError", "MigrationOutcome", "ScaleOutcome", "Submitted", "Unavailable"]
