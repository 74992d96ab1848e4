"""autospeed: find the training recipe that reaches a target accuracy fastest."""

__version__ = "0.1.0"


def init(defaults=None):
    """The knob context of a user's own training loop (autospeed.script.context): the recipe autospeed runs
    the script with, or `defaults` when the script runs on its own."""
    from autospeed.script.context import init as _init

    return _init(defaults)
