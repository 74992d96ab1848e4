"""autospeed: find the training recipe that reaches a target accuracy fastest."""

__version__ = "0.1.0"
