"""Run a command that sees one folder as an empty tmpfs: `python hide_folder.py FOLDER COMMAND [ARGS...]`.

The command runs in a user and mount namespace of its own (Linux), made with libc's unshare(2) and mount(2)
through ctypes, so no `unshare` binary is needed (util-linux is missing on minimal images); what it needs is a
kernel that lets an unprivileged user make the namespaces. tests/reliability/test_cluster.py starts its second
Ray node this way: a storage path only the head node sees. `hide` raises OSError, naming the call the kernel
refused, where it cannot.
"""

from __future__ import annotations

import ctypes
import os
import sys

CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000  # <sched.h>
MS_REC, MS_PRIVATE = 0x4000, 0x40000  # <sys/mount.h>


def _check(code: int, call: str) -> None:
    if code != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{call}: {os.strerror(errno)}")


def hide(folder: str) -> None:
    """From now on this process (single-threaded, as unshare(CLONE_NEWUSER) requires) and its children see
    `folder` as an empty tmpfs; every other process still sees what is there."""
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare(CLONE_NEWUSER | CLONE_NEWNS)")
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:  # root inside, this user outside (unshare --map-root-user)
            f.write(text)
    # private first, so the tmpfs stays in this namespace (unshare(1) does the same by default)
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    _check(libc.mount(b"tmpfs", os.fsencode(folder), b"tmpfs", 0, None), f"mount -t tmpfs tmpfs {folder}")


if __name__ == "__main__":
    hide(sys.argv[1])
    os.execvp(sys.argv[2], sys.argv[2:])
