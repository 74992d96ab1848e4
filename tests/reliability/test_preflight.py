"""Infrastructure faults fail a preflight check before any training: exit 1 (2 when
malformed), one line naming what and where, and nothing left in the tracking store."""

from __future__ import annotations

import time

import pytest

from autospeed.cli import main

from .conftest import error_lines, search_runs
from .test_bad_input import GOOD


class _Done:
    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def _search(tmp_path, *extra: str, uri: str, storage: str | None = None, capfd=None):
    """`autospeed search` through the CLI's own entry point (in process: these fail in seconds)."""
    space = tmp_path / "space.yaml"
    space.write_text(GOOD)
    storage = storage or str(tmp_path / "store")
    start = time.monotonic()
    code = main(["search", "--space", str(space), "--tracking-uri", uri, "--storage-path", storage, *extra])
    out, err = capfd.readouterr()
    return _Done(code, out, err), time.monotonic() - start


def _one_line(p) -> str:
    lines = error_lines(p.stderr)
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    return lines[0]


@pytest.mark.parametrize("uri,code,words", [
    ("http://127.0.0.1:9/", 1, ["127.0.0.1:9", "unreachable"]),
    ("nosuchscheme://somewhere/x", 2, ["nosuchscheme://somewhere/x", "not a usable"]),
    ("localhost:5000", 2, ["malformed", "localhost:5000"]),
])
def test_bad_tracking_uri(tmp_path, capfd, uri, code, words):
    p, _ = _search(tmp_path, capfd=capfd, uri=uri)
    assert p.returncode == code, p.stderr
    line = _one_line(p)
    assert "--tracking-uri" in line or "tracking store" in line
    for w in words:
        assert w in line
    assert not (tmp_path / "store").exists()  # nothing ran


def test_credentials_in_tracking_uri_never_shown(tmp_path, capfd):
    p, _ = _search(tmp_path, capfd=capfd, uri="http://alice:s3cr3t-token@127.0.0.1:9/")
    assert p.returncode == 1
    assert "s3cr3t-token" not in p.stdout + p.stderr
    assert "http://***@127.0.0.1:9/" in _one_line(p)


def test_unwritable_storage_path(tmp_path, capfd, new_store):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    uri = new_store(tmp_path)
    p, _ = _search(tmp_path, capfd=capfd, uri=uri, storage=str(blocker / "results"))
    assert p.returncode == 1
    line = _one_line(p)
    assert "--storage-path" in line and str(blocker) in line
    assert search_runs(uri, "bad") == ([], [])


def test_unreachable_ray_address(tmp_path, capfd, new_store):
    uri = new_store(tmp_path)
    p, seconds = _search(tmp_path, "--ray-address", "127.0.0.1:9", capfd=capfd, uri=uri)
    assert p.returncode == 1
    line = _one_line(p)
    assert "--ray-address" in line and "127.0.0.1:9" in line
    assert seconds < 60  # ray.init alone would retry a dead address for minutes
    assert search_runs(uri, "bad") == ([], [])  # no parent run left RUNNING


def test_malformed_ray_address(tmp_path, capfd, new_store):
    p, _ = _search(tmp_path, "--ray-address", "head node:port", capfd=capfd, uri=new_store(tmp_path))
    assert p.returncode == 2
    assert "--ray-address" in _one_line(p) and "head node:port" in _one_line(p)
