"""The `autospeed` command as a process: exit codes and complete output through its fast exit (cli.entry)."""

from __future__ import annotations

import subprocess
import sys


def test_help_exits_0_with_the_usage(run_cli):
    for args in (["--help"], ["search", "--help"]):
        proc = run_cli(*args)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith("usage: autospeed")


def test_a_usage_error_exits_2_in_one_line(run_cli):
    proc = run_cli("no-such-command")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "invalid choice" in proc.stderr


def test_piped_output_arrives_whole_before_the_process_exits(run_cli):
    """stdout to a pipe is block-buffered: none of it may be lost when the process skips its teardown."""
    from autospeed.workloads import BUILTIN

    listed = run_cli("workloads").stdout.splitlines()
    assert [line.split()[0] for line in listed] == [*BUILTIN, "<plugin>"]


def test_the_installed_command_is_the_fast_exit():
    """The console script and `python -m autospeed` both run cli.entry."""
    from importlib.metadata import entry_points

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "autospeed"]
    assert script.value == "autospeed.cli:entry"
    proc = subprocess.run([sys.executable, "-m", "autospeed", "validate", "--space", "/no/such/space.yaml"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "/no/such/space.yaml" in proc.stderr
