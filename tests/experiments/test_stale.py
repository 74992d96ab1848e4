"""`python -m experiments stale`: a results file that README.md or docs/ cite is stale when a commit changed a path
its experiment measures after the commit the file names, unless every line citing it says `measured at` that commit
(cited as an earlier measurement); on a repository of its own, then on this one."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))
import _stale  # noqa: E402
from _stale import Cited  # noqa: E402

RESULT = "experiments/results/r.md"
COMMAND = "python experiments/r.py --out experiments/results/r.md"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def commit(repo: Path, files: dict[str, str], message: str) -> str:
    """Write `files` and commit them; the new commit's short hash."""
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", *files)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "--short", "HEAD")


def results(measured_at: str) -> str:
    return f"# r\n\n```\ncommit: {measured_at}\ncommand: {COMMAND}\nmachine: test\ndate: 2026-01-01\n```\n\nr = 1\n"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository whose README cites experiments/results/r.md, and code/a.py, code/b.py."""
    git(tmp_path, "init", "-q")
    git(tmp_path, "config", "user.email", "t@example.com")
    git(tmp_path, "config", "user.name", "t")
    commit(tmp_path, {"code/a.py": "a = 1\n", "code/b.py": "b = 1\n",
                      "README.md": "r is 1 ([r.md](experiments/results/r.md)).\n"}, "code")
    return tmp_path


def entry(**kw) -> Cited:
    return Cited(**{"file": RESULT, "paths": ("code/a.py", "experiments/r.py"), "command": COMMAND, **kw})


def test_a_cited_file_is_fresh_until_a_commit_changes_a_path_it_measures(repo):
    measured = git(repo, "rev-parse", "--short", "HEAD")
    commit(repo, {RESULT: results(measured)}, "results")
    assert _stale.check(repo, [entry()]) == ([], [], "stale: none; of 1 cited results files, 1 are as new as the "
                                                     "code they measure, 0 cited as earlier measurements")
    commit(repo, {"code/b.py": "b = 2\n"}, "a path it does not measure")
    assert _stale.check(repo, [entry()])[0] == []

    changed = commit(repo, {"code/a.py": "a = 2\n"}, "a path it measures")
    lines, earlier, summary = _stale.check(repo, [entry()])
    assert lines == [f"{RESULT}: measured at {measured}, but {changed} changed code/a.py since; regenerate: {COMMAND}"]
    assert earlier == []
    assert summary == ("stale: 1 of 1 cited results files predate the code they measure without saying so; 0 fresh, "
                       "0 cited as earlier measurements")


def test_a_dirty_tree_counts_as_its_commit_and_an_unknown_commit_is_stale(repo):
    measured = git(repo, "rev-parse", "--short", "HEAD")
    commit(repo, {RESULT: results(f"{measured}-dirty (code/a.py)")}, "results of a dirty tree")
    assert _stale.check(repo, [entry()])[0] == []
    changed = commit(repo, {"code/a.py": "a = 2\n"}, "the change that was dirty, committed")
    assert f"but {changed} changed code/a.py" in _stale.check(repo, [entry()])[0][0]

    commit(repo, {RESULT: results("0123abc")}, "results from a commit nobody has")
    assert _stale.check(repo, [entry()])[0] == [
        f"{RESULT}: measured at 0123abc, a commit this repository does not know; regenerate: {COMMAND}"]


def test_every_commit_a_file_names_counts_and_a_file_without_one_takes_its_siblings(repo):
    """long_job.md names its curves' commit beside its own; a copied recipe names none, its results file does."""
    old = git(repo, "rev-parse", "--short", "HEAD")
    changed = commit(repo, {"code/a.py": "a = 2\n"}, "change")
    commit(repo, {RESULT: results(changed) + f"\nCurves, recorded at:\n\n```\ncommit: {old}\n```\n",
                  "experiments/results/r_best.yaml": "lr: 0.1\n",
                  "README.md": "[r.md](experiments/results/r.md), [its recipe](experiments/results/r_best.yaml)\n"},
           "results drawn from older curves")
    recipe = entry(file="experiments/results/r_best.yaml", siblings=(RESULT,))
    lines, _, _ = _stale.check(repo, [entry(siblings=("experiments/results/r_best.yaml",)), recipe])
    assert lines == [f"{path}: measured at {old}, but {changed} changed code/a.py since; regenerate: {COMMAND}"
                     for path in (RESULT, "experiments/results/r_best.yaml")]


def test_an_input_results_file_counts_by_its_commit_not_by_when_it_was_committed(repo):
    """noise.md, then interval_coverage.md that reads it, written at one commit and committed together: fresh;
    noise.md measured again at a later commit: interval_coverage.md is stale."""
    measured = git(repo, "rev-parse", "--short", "HEAD")
    source = "experiments/results/in.md"
    reader = entry(paths=("code/a.py", source))
    inputs = Cited(source, ("code/a.py",), "python experiments/in.py")
    commit(repo, {source: results(measured), RESULT: results(measured)}, "both results, one commit")
    assert _stale.check(repo, [reader, inputs])[0] == []

    later = commit(repo, {"code/b.py": "b = 2\n"}, "a later commit")
    commit(repo, {source: results(later)}, "the input measured again")
    assert _stale.check(repo, [reader, inputs])[0] == [
        f"{RESULT}: measured at {measured}, but its input {source} was measured at {later} since; "
        f"regenerate (after {source}): {COMMAND}"]


def test_an_uncited_file_is_not_checked_and_a_skipped_one_is_counted_with_its_reason(repo):
    commit(repo, {RESULT: results("0123abc")}, "results nobody can check")
    uncited = entry(file="experiments/results/other.md")
    skipped = entry(paths=(), skip="r declares no paths")
    assert _stale.check(repo, [uncited]) == ([], [], "stale: none; of 0 cited results files, 0 are as new as the "
                                                      "code they measure, 0 cited as earlier measurements")
    assert _stale.check(repo, [skipped])[2].endswith("; 1 skipped (r declares no paths)")


def stale_result(repo: Path) -> tuple[str, str]:
    """r.md measured at one commit, then a change to a path it measures: (the commit it names, the change)."""
    measured = git(repo, "rev-parse", "--short", "HEAD")
    commit(repo, {RESULT: results(f"{measured}-dirty (code/a.py)")}, "results")
    return measured, commit(repo, {"code/a.py": "a = 2\n"}, "a path it measures")


def test_a_stale_file_every_citing_line_says_measured_at_its_commit_is_cited_as_earlier(repo):
    """A figure may predate its code where the reader is told so beside it: every line that cites it, in README.md
    and docs/*.md, says `measured at` the commit it names; a command in a code block that writes it needs not."""
    measured, _ = stale_result(repo)
    commit(repo, {"README.md": f"r is 1 ([r.md](experiments/results/r.md), measured at {measured}, before later "
                               "changes to the code it measures).\n",
                  "docs/r.md": f"# r\n\n```bash\n{COMMAND}\n```\n\nr is 1 (measured at `{measured}`): "
                               "[results/r.md](../experiments/results/r.md).\n"}, "cite it as earlier")
    assert _stale.check(repo, [entry()]) == (
        [], [f"cited as earlier: {RESULT} (measured at {measured}; regenerate: {COMMAND})"],
        "stale: none; of 1 cited results files, 0 are as new as the code they measure, 1 cited as earlier "
        "measurements")
    full = git(repo, "rev-parse", measured)
    commit(repo, {"README.md": f"r is 1 (measured at {full}): experiments/results/r.md\n"}, "a full hash")
    assert _stale.check(repo, [entry()])[:2] == (
        [], [f"cited as earlier: {RESULT} (measured at {full}, {measured}; regenerate: {COMMAND})"])


def test_one_citing_line_without_measured_at_fails(repo):
    measured, changed = stale_result(repo)
    commit(repo, {"README.md": f"r is 1 (measured at {measured}): [r.md](experiments/results/r.md).\n",
                  "docs/r.md": "r is 1: [r.md](../experiments/results/r.md).\n"
                               f"(measured at {measured}, on the line after the citation, does not count)\n"},
           "one line says it, one does not")
    lines, earlier, summary = _stale.check(repo, [entry()])
    assert lines == [f"{RESULT}: measured at {measured}-dirty, but {changed} changed code/a.py since; "
                     f"regenerate: {COMMAND}"]
    assert earlier == [] and summary.startswith("stale: 1 of 1 cited results files")

    commit(repo, {"README.md": f"```bash\n{COMMAND}  # measured at {measured}\n```\n",
                  "docs/r.md": "no citation\n"}, "cited only by a command in a code block")
    assert len(_stale.check(repo, [entry()])[0]) == 1


def test_measured_at_a_commit_the_file_does_not_name_fails(repo):
    measured, changed = stale_result(repo)
    for wrong in (changed, "0123abc", measured[:6]):  # a later commit, an unknown one, too short a prefix
        commit(repo, {"README.md": f"r is 1 (measured at {wrong}): [r.md](experiments/results/r.md).\n"},
               f"measured at {wrong}")
        assert len(_stale.check(repo, [entry()])[0]) == 1, wrong
    commit(repo, {RESULT: results("0123abc"),
                  "README.md": "r is 1 (measured at 0123abc): [r.md](experiments/results/r.md).\n"},
           "a commit the file names but nobody has")
    assert _stale.check(repo, [entry()])[0] == [
        f"{RESULT}: measured at 0123abc, a commit this repository does not know; regenerate: {COMMAND}"]


def test_citations_match_a_results_path_not_a_longer_name_that_ends_like_it():
    text = "see [payback.md](../experiments/results/payback.md#run-f) and long_job_payback.md."
    assert _stale.is_cited("experiments/results/payback.md", text)
    assert _stale.is_cited("experiments/results/long_job_payback.md", text)
    assert not _stale.is_cited("experiments/results/job_payback.md", text)
    assert _stale.is_cited("experiments/results/gpu/search20/speedup_gpu.md", "(results/gpu/search20/speedup_gpu.md)")
    assert not _stale.is_cited("experiments/results/gpu/speedup_gpu.md", "(results/gpu/search20/speedup_gpu.md)")


def test_commits_are_read_from_headers_json_provenance_and_sentences(tmp_path):
    page = tmp_path / "r.json"
    page.write_text('{"provenance": "commit: f4d8365-dirty (experiments/long_job.py)\\ncommand: python x"}\n'
                    "Ground truth (its measurements, commit: a81efa2); commit: 9804334\n")
    assert _stale.named_commits(page) == ["f4d8365-dirty", "a81efa2", "9804334"]
    assert [_stale.revision(c) for c in ("f4d8365-dirty", "v1.0-3-gabc1234", "abc1234")] == \
        ["f4d8365", "abc1234", "abc1234"]


def test_a_copy_of_the_tree_without_its_history_is_skipped_not_failed(repo, tmp_path_factory):
    assert _stale.has_history(repo)
    assert not _stale.has_history(tmp_path_factory.mktemp("copy"))  # as the device machine's copy of the tree


def test_every_cited_results_file_is_as_new_as_the_code_it_measures():
    """The real check, on this repository: it fails until every stale results file it prints is regenerated with
    the command printed beside it (on a quiet machine), and the new files are committed."""
    proc = subprocess.run([sys.executable, "-m", "experiments", "stale"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
