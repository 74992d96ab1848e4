"""Safe YAML in and atomic YAML out.

Loading rejects duplicate keys (PyYAML silently keeps the last one) and turns
syntax errors into one line with the file, line and column.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from autospeed.errors import UserError


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False):
    loader.flatten_mapping(node)
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            line = key_node.start_mark.line + 1
            first = seen[key].start_mark.line + 1
            raise _DuplicateKey(f"duplicate key '{key}' at line {line} (first at line {first}); keep one")
        seen[key] = key_node
    return loader.construct_mapping(node, deep=deep)


class _DuplicateKey(Exception):
    """A mapping names the same key twice (PyYAML would keep the last silently)."""


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml(path: str | os.PathLike) -> Any:
    """Parse a YAML file safely; any problem is a one-line UserError naming the file."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UserError(f"{path}: file not found; check the path") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror}); check the path and permissions") from None
    return load_yaml_text(text, str(path))


def load_yaml_text(text: str, source: str) -> Any:
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - _StrictLoader is a SafeLoader
    except _DuplicateKey as e:
        raise UserError(f"{source}: {e}") from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        what = (e.problem or e.context or "syntax error").strip()
        raise UserError(f"{source}: YAML syntax error at {where}: {what}; fix the YAML syntax there") from None
    except yaml.YAMLError as e:
        raise UserError(f"{source}: invalid YAML ({str(e).splitlines()[0]}); fix the YAML syntax") from None


def dump_yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path` to write; when the block ends without an
    error it replaces `path` in one rename, so a reader (or a kill mid-write) never sees
    a half-written file. Permissions are what a plain open() gives: the file's own when
    it exists, else 0666 minus the umask (the temporary file is created that way)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex[:8]}.tmp"
    os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    try:
        with contextlib.suppress(FileNotFoundError):
            os.chmod(tmp, path.stat().st_mode & 0o777)
        yield tmp
        os.replace(tmp, path)
        fsync_folder(path.parent)  # the rename itself survives a power cut
    finally:
        tmp.unlink(missing_ok=True)  # gone already after the rename


def fsync_folder(folder: str | os.PathLike) -> None:
    """Sync a folder's entries to disk (a rename into it is durable only then); a no-op where the OS cannot."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):  # some filesystems refuse fsync on a folder
            os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write text to path atomically (see atomic_path), synced to disk."""
    with atomic_path(path) as tmp, open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    return Path(path)
