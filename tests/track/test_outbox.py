"""The tracking journal (autospeed/track/outbox.py) against a real MLflow store: no write that returned to its
caller is lost, whatever an earlier session left at the end of the file."""

from __future__ import annotations

import json

from autospeed.track.outbox import JOURNAL, Outbox


def _journal_ops(folder) -> list[dict]:
    """The writes a later session can read back from the journal: one JSON object per line."""
    ops = []
    for line in (folder / JOURNAL).read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if "op" in entry:
            ops.append(entry)
    return ops


def test_a_torn_last_line_is_cut_so_the_next_sessions_writes_are_each_readable(tmp_path, new_store):
    """A kill (or a full disk) in the middle of a journal write leaves its line cut short. The next session
    appends after it: its first write, synced and returned, must not land on the torn line, where it would be
    unreadable to the session after (on the code before the fix: 'b' was lost, and with it every later write
    to a run whose creation it was)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=new_store(tmp_path / "store"))
    run_id = client.create_run(client.create_experiment("journal")).info.run_id
    folder = tmp_path / "search"
    folder.mkdir()
    a = {"seq": 1, "op": "set_tag", "args": {"run_id": run_id, "key": "a", "value": "1"}}
    torn = json.dumps({"seq": 2, "op": "set_tag", "args": {"run_id": run_id, "key": "x", "value": "1" * 5000}})
    (folder / JOURNAL).write_text(json.dumps(a) + "\n" + torn[:4096])  # killed one page into its write

    outbox = Outbox(client, folder, grace_seconds=60)
    outbox.set_tag(run_id, "b", "2")
    outbox.set_tag(run_id, "c", "3")
    assert outbox.flush(timeout_seconds=60)
    outbox.close()

    keys = [op["args"]["key"] for op in _journal_ops(folder)]
    assert keys == ["a", "b", "c"], (folder / JOURNAL).read_text()[:300]
    assert {"a", "b", "c"} <= set(client.get_run(run_id).data.tags)
    assert "x" not in client.get_run(run_id).data.tags  # the torn write never returned: it is not sent
    later = Outbox(client, folder, grace_seconds=60)
    assert later.pending == 0  # a resume finds nothing left to send
    later.close()


def test_a_write_the_store_refuses_is_said_at_once_and_counted_on_its_run(tmp_path, new_store, capsys):
    """MLflow refuses to change a logged param (HTTP 400): the outbox does not retry it, but says so in one line
    when it happens and tags the run with the count; the search's closing summary counts them (run.py)."""
    from mlflow.entities import Param
    from mlflow.tracking import MlflowClient

    from autospeed.track.outbox import TAG_REFUSED

    client = MlflowClient(tracking_uri=new_store(tmp_path / "store"))
    run_id = client.create_run(client.create_experiment("refused")).info.run_id
    outbox = Outbox(client, tmp_path, grace_seconds=60)
    outbox.log_batch(run_id, params=[Param("lr", "0.1")])
    outbox.log_batch(run_id, params=[Param("lr", "0.2")])  # a param changed: the store refuses it
    outbox.set_tag(run_id, "after", "1")  # the writes behind it still go
    assert outbox.flush(timeout_seconds=60)
    outbox.close()

    assert len(outbox.refused) == 1 and outbox.refused[0].startswith(f"log_batch on run {run_id}:")
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "refused" in ln]
    assert len(lines) == 1 and "the tracking store refused a write (log_batch on run" in lines[0], lines
    run = client.get_run(run_id)
    assert run.data.params["lr"] == "0.1" and run.data.tags[TAG_REFUSED] == "1" and run.data.tags["after"] == "1"


def test_a_logged_file_is_kept_beside_the_journal_until_the_store_has_it(tmp_path, new_store):
    """A file logged through the outbox (the confirmed winner's compile cache) is copied beside the journal
    before the write returns: its caller may delete its own copy at once (a temporary folder), the store still
    gets the file, and the kept copy goes once the store has it."""
    from mlflow.tracking import MlflowClient

    from autospeed.track.outbox import FILES

    client = MlflowClient(tracking_uri=new_store(tmp_path / "store"))
    run_id = client.create_run(client.create_experiment("files")).info.run_id
    source = tmp_path / "cache.bin"
    source.write_bytes(b"\x00compiled" * 100)
    folder = tmp_path / "search"
    folder.mkdir()
    outbox = Outbox(client, folder, grace_seconds=60)
    outbox.log_artifact(run_id, str(source))
    source.unlink()  # as the confirmation's temporary folder is removed when it ends
    assert outbox.flush(timeout_seconds=60)
    outbox.close()

    assert [f.path for f in client.list_artifacts(run_id)] == ["cache.bin"]
    sent = client.download_artifacts(run_id, "cache.bin", str(tmp_path))
    assert open(sent, "rb").read() == b"\x00compiled" * 100
    assert not any((folder / FILES).iterdir())  # the copy is gone once delivered
