"""Monitors: Spark REST, psutil and source backlog, turned into snapshots."""
