"""The managed PySpark pipelines, their sources and sinks, the in-driver agent, the load generator."""
