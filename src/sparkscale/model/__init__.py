"""model: snapshot, plan, history, typed events.

The data sparkscale reads, decides on, persists and sends, and their JSON: a snapshot of a query
(snapshot.py, snapshot_merge.py), a policy's plan (plan.py), a migration's journal (journal.py),
with the checks of user JSON (fields.py) and the pydantic codec that reads and writes them
(codec.py). Nothing here imports actuators, the daemon, monitors or policies, so that all of them
can import it.
"""
