"""A user's own training script as a workload: the knob context it calls (context.py, `autospeed.init`),
the protocol it talks (channel.py) and the runner that starts it (launch.py)."""
