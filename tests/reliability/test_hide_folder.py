"""The launcher test_cluster.py starts its second Ray node with (hide_folder.py): the command it runs sees one
folder as empty, every other process still sees its files. It runs wherever the kernel allows unprivileged user
and mount namespaces, with or without the `unshare` binary; where the kernel refuses them it skips, saying that
test_cluster.py's storage check skips too, and why."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HIDE = str(Path(__file__).with_name("hide_folder.py"))
LIST = "import os, sys; print(sorted(os.listdir(sys.argv[1])))"


def test_the_command_sees_the_folder_empty_and_everyone_else_its_files(tmp_path):
    (tmp_path / "ledger.json").write_text("{}")
    done = subprocess.run([sys.executable, HIDE, str(tmp_path), sys.executable, "-c", LIST, str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    if done.returncode != 0 and "unshare" in done.stderr:
        pytest.skip(f"this kernel lets no unprivileged user make a user and mount namespace "
                    f"({done.stderr.strip().splitlines()[-1]}): test_cluster.py's storage check skips too")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"  # hidden from the command
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.json"]  # not from this process
