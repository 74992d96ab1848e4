"""Two searches of the same name on one storage path: the second refuses in one line naming the first's host
and pid (exit 2), and a lock whose holder was SIGKILLed is free again (docs/design.md "Crash anywhere, lose
nothing")."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

from autospeed.cli import main
from autospeed.search.storage import LOCK_FILE, search_lock, search_root

from .conftest import error_lines, search_runs
from .test_bad_input import GOOD

HOLD = """
import sys
from pathlib import Path
from autospeed.search.storage import search_lock
with search_lock(Path(sys.argv[1]), "bad"):
    print("held", flush=True)
    sys.stdin.readline()  # until the test says so, or is killed
"""


def test_a_second_search_of_a_running_name_refuses_and_a_killed_holder_frees_the_name(tmp_path, capfd, new_store):
    store = tmp_path / "store"
    root = search_root(str(store), "bad")
    root.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"  # the first search of "bad" is running
        space = tmp_path / "space.yaml"
        space.write_text(GOOD)
        uri = new_store(tmp_path)
        code = main(["search", "--space", str(space), "--tracking-uri", uri, "--storage-path", str(store)])
        out, err = capfd.readouterr()
        assert code == 2, out + err
        [line] = error_lines(err)
        assert "another search of this name is running" in line
        assert f"host {socket.gethostname()}, pid {holder.pid}" in line and "--name" in line
        assert search_runs(uri, "bad") == ([], [])  # the second created nothing
    finally:
        os.kill(holder.pid, signal.SIGKILL)  # the first search dies without a word: its lock goes with it
        holder.wait()
    with search_lock(root, "bad"):  # free: the next search of the name (a --resume) goes on, and says who it is
        assert f"pid {os.getpid()}" in (root / LOCK_FILE).read_text().replace('"pid": ', "pid ")
