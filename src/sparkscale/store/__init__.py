"""All the state the daemon, the control loop, the client API and the CLI keep in Redis and
ZooKeeper, behind one typed seam (store/base.py)."""
