"""The two kinds of failure a user can see. The CLI turns them into exit codes."""


class UserError(Exception):
    """Bad input: a file, key or value the user must fix. Exit code 2.

    The message is one line naming the file, the key path and the fix.
    """

    exit_code = 2


class RunFailure(Exception):
    """The input was fine but running it failed (a crashed run, an unreachable
    server, no trial reached the target). Exit code 1."""

    exit_code = 1


class Interrupted(Exception):
    """The search stopped as interrupted, resumable, for a reason outside the user's keys: a tracking store silent
    past its grace, storage that refuses writes. Exit code 130, with the command that resumes it."""

    exit_code = 130
