"""The composition root: the MAPE loop, the daemon's lifecycle, and the command line."""
