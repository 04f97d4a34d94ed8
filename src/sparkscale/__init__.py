"""sparkscale: an autoscaling control loop (MAPE) for stateful Spark Structured Streaming pipelines."""

__version__ = "0.1.0"
