"""Every file autospeed writes of its own is written whole or not at all: through yamlio.atomic_path /
write_atomic (a temporary file beside it, synced, renamed over it, the folder synced), so a kill at any instant
leaves the old file or the new one, never a torn one. This reads the package's source for every call that
writes a file and fails on one that is not in the list below, each with why it is safe."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "autospeed"

# (file, call) -> why this write cannot leave a torn file of autospeed's
ALLOWED = {
    ("yamlio.py", "open"): "write_atomic: the temporary file atomic_path renames into place",
    ("workloads/_cache.py", "save"): "the dataset cache: a temporary .npy renamed into place (os.replace)",
    ("workloads/_cache.py", "write_text"): "the cache's manifest: a temporary file renamed into place, written last",
    ("search/storage.py", "write_text"): "check_writable's empty probe file, removed at once",
    ("_ray.py", "write_text"): "check_storage_shared's probe token, read back and removed",
    ("track/outbox.py", "open"): "the tracking journal, appended line by line and synced: a torn last line (a kill "
                                 "mid-append) is skipped on load, and its write had not returned to its caller",
    ("train/environment.py", "open"): "/proc/self/clear_refs: resets the peak RSS, not a file on disk",
    ("script/runner.py", "fdopen"): "a pipe to the user's script (the reply channel), not a file",
    ("script/channel.py", "fdopen"): "a pipe to the runner (the report channel), not a file",
    ("train/compile_cache.py", "open"): "the cache artifacts, written into atomic_path's temporary file and synced",
    ("run_recipe.py", "save"): "compile_cache.save, which writes through atomic_path (not numpy's save)",
}
WRITE_MODES = ("w", "a", "x", "+")


def _writes(tree: ast.AST):
    """(call name, line) of each call in `tree` that writes a file."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name in ("write_text", "write_bytes", "save"):  # pathlib's writes, numpy's save
            yield name, node.lineno
        elif name == "dump" and len(node.args) > 1:  # json.dump / yaml.dump into an open file
            yield name, node.lineno
        elif name in ("open", "fdopen"):
            mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"),
                                                                  None)
            if isinstance(mode, ast.Constant) and isinstance(mode.value, str) and any(
                    m in mode.value for m in WRITE_MODES):
                yield name, node.lineno


def test_every_file_autospeed_writes_is_written_atomically():
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for name, line in _writes(ast.parse(path.read_text(), str(path))):
            found.setdefault((rel, name), []).append(line)
    unlisted = {f"{rel}:{lines} {name}()" for (rel, name), lines in found.items() if (rel, name) not in ALLOWED}
    assert not unlisted, (f"these calls write files outside yamlio.write_atomic / atomic_path: {sorted(unlisted)}; "
                          f"write through write_atomic, or list the call in ALLOWED with why it is safe")
    stale = set(ALLOWED) - set(found)
    assert not stale, f"ALLOWED lists writes the code no longer makes: {sorted(stale)}; drop them"
