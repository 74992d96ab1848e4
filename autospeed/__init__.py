"""autospeed: find the training recipe that reaches a target accuracy fastest."""


def init(defaults=None):
    """The knob context of a user's own training loop (autospeed.script.context): the recipe autospeed runs
    the script with, or `defaults` when the script runs on its own."""
    from autospeed.script.context import init as _init

    return _init(defaults)


def context():
    """The run's knob context from anywhere in a user's script (inside a `train()` function): what `init`
    returned; an error before `init`."""
    from autospeed.script.context import context as _context

    return _context()


def __getattr__(name: str):
    if name == "__version__":  # read from the installed metadata when asked: `import autospeed` stays cheap
        from autospeed._version import installed_version

        return installed_version()
    raise AttributeError(f"module 'autospeed' has no attribute {name!r}")
