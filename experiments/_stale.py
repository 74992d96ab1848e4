"""`python -m experiments stale`: is every results file that README.md or docs/ cite as new as the code it measures?

A results file names the commit it was measured at: its header's `commit:` line, and the provenance of any
measurement it was drawn from (long_job.md's curves, a merged payback.md's runs). Its experiment declares the
paths its figures depend on (experiments/__init__.py, `measures`). The file is stale when a commit that changed
one of those paths is not an ancestor of (or equal to) every commit it names: the figure then describes code that
has changed since, and the command printed beside it regenerates it. A measured path that is itself a results
file (an input) counts by the commit it names instead: it must be an ancestor of (or equal to) the file's own.
A commit the repository does not know is stale too: nobody can check out the tree it was measured on. Only the
commit graph counts, so a figure measured
on a dirty tree is as new as the commit it names, and a measured path changed by a later commit (the change that
was dirty, committed) makes it stale: regenerate on a clean tree.

A figure may predate its code only where the reader is told so, next to the figure. So a stale file is accepted as
cited as an earlier measurement, and does not fail the check, when every line of README.md and docs/*.md that
cites it outside a fenced code block (there a command that writes it, not a figure) also says `measured at C`,
where C is a commit the file names, or a prefix of one of at least 7 hex digits, that this repository knows: the
line tells the reader which tree the figure describes, and `python -m experiments stale` lists the file apart, with
the command that measures it again. One citing line without the phrase, or with another commit in it, and the file
is stale: a reader of that line would take the figure for today's.

This module knows nothing of EXPERIMENTS: it takes what to check as Cited entries, so that a test can run it on a
repository of its own.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

RESULTS = "experiments/results"
# "commit: X" where a provenance block names it: a header line, a JSON string's "...\ncommit: X\n...", or a
# sentence's "(..., commit: X)". X ends at whitespace, a backslash (JSON's \n), a quote, a comma or a parenthesis.
COMMIT = re.compile(r"(?<![\w-])commit: ([^\s\\\",)]+)")
# "measured at C" in a line that cites a results file: C a commit of at least 7 hex digits, maybe in backticks.
MEASURED_AT = re.compile(r"\bmeasured at `?([0-9a-f]{7,40})(?![0-9a-zA-Z])")


@dataclass(frozen=True)
class Cited:
    """A results file a command writes, and what decides whether it is stale."""

    file: str  # from the repository root
    paths: tuple[str, ...]  # what its figures depend on; () skips it, for the reason in `skip`
    command: str  # the command that regenerates it
    siblings: tuple[str, ...] = ()  # the other files its command writes: whose commit counts when it names none
    skip: str = ""  # why it is not checked (no paths declared, an archived record)


def citations(root: Path) -> str:
    """The text that cites results: README.md and every docs/*.md."""
    files = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    return "\n".join(f.read_text() for f in files if f.is_file())


def prose_lines(root: Path) -> list[str]:
    """The lines of README.md and every docs/*.md outside fenced code blocks (``` ... ```): those that can tell a
    reader when a figure was measured. A command in a code block that writes a results file cites it too, but
    shows no figure of it."""
    files = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    out, fenced = [], False
    for f in files:
        if not f.is_file():
            continue
        for line in f.read_text().splitlines():
            if line.lstrip().startswith("```"):
                fenced = not fenced
            elif not fenced:
                out.append(line)
        fenced = False
    return out


def is_cited(file: str, text: str) -> bool:
    """Whether `text` names the results file `file`, by its path under experiments/results/ (so `noise.md`,
    `results/noise.md` and `../experiments/results/noise.md` all count, and `long_job_payback.md` is not
    `payback.md`)."""
    name = file.removeprefix(f"{RESULTS}/")
    return re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", text) is not None


def named_commits(path: Path) -> list[str]:
    """The commits a results file names, in order, each once, as written (`9804334`, `f4d8365-dirty`); [] for a
    file that names none (a figure, a copied recipe) or is not there."""
    try:
        text = path.read_text(errors="replace")
    except (FileNotFoundError, IsADirectoryError):
        return []
    return list(dict.fromkeys(COMMIT.findall(text)))


def revision(named: str) -> str:
    """The revision a provenance line names: `git describe --always` output less its `-dirty`, and a tag's
    `v1-3-gabc1234` as `abc1234`."""
    named = named.removesuffix("-dirty")
    described = re.fullmatch(r".+-\d+-g([0-9a-f]+)", named)
    return described.group(1) if described else named


def git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)


def newer_change(root: Path, commit: str, paths: tuple[str, ...]) -> tuple[str, list[str]] | None:
    """(the newest commit that changed one of `paths` and is not `commit` or one of its ancestors, the paths it
    changed), or None when there is none: `git log COMMIT..HEAD -- PATHS`, which also holds where history
    branches and merges."""
    proc = git(root, "log", "-1", "--format=%h", "--name-only", f"{commit}..HEAD", "--", *paths)
    if proc.returncode:
        raise SystemExit(f"stale: git log {commit}..HEAD failed: {proc.stderr.strip()}")
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    return (lines[0], lines[1:]) if lines else None


def commits_of(root: Path, c: Cited) -> list[str]:
    """The commits `c`'s file names or, where it names none (a figure, a copied recipe), those its command's first
    other file names."""
    for file in (c.file, *c.siblings):
        named = named_commits(root / file)
        if named:
            return named
    return []


def known(root: Path, named: str) -> str | None:
    """The full hash of the commit a provenance line names, or None when this repository does not know it."""
    full = git(root, "rev-parse", "--verify", "--quiet", f"{revision(named)}^{{commit}}")
    return full.stdout.strip() if full.returncode == 0 and revision(named) else None


def why_stale(root: Path, c: Cited, index: dict[str, Cited]) -> str | None:
    """One line saying why `c` is stale, or None when it is as new as its paths.

    A path under experiments/results/ is an input (noise.md's spread, speedup_best.yaml's recipe): its commits
    are compared, not its file's history, since one `python -m experiments all` writes the input and then reads it
    at the same commit, and commits both after. `c` is stale when its input was measured at a commit that is not
    an ancestor of (or equal to) its own: the input was measured again since. Code paths count by their history."""
    named = commits_of(root, c)
    if not named:
        return f"{c.file}: names no commit; regenerate: {c.command}"
    inputs = [p for p in c.paths if p.startswith(f"{RESULTS}/")]
    code = tuple(p for p in c.paths if p not in inputs)
    for text in named:
        full = known(root, text)
        if full is None:
            return f"{c.file}: measured at {text}, a commit this repository does not know; regenerate: {c.command}"
        change = newer_change(root, full, code) if code else None
        if change:
            commit, changed = change
            more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
            return (f"{c.file}: measured at {text}, but {commit} changed {changed[0] if changed else 'its paths'}"
                    f"{more} since; regenerate: {c.command}")
        for source in inputs:
            for input_text in commits_of(root, index.get(source, Cited(source, (), ""))):
                input_full = known(root, input_text)
                if input_full is None or git(root, "merge-base", "--is-ancestor", input_full, full).returncode:
                    return (f"{c.file}: measured at {text}, but its input {source} was measured at {input_text} "
                            f"since; regenerate (after {source}): {c.command}")
    return None


def cited_as_earlier(root: Path, c: Cited, lines: list[str]) -> list[str]:
    """The commits, as written, that the `lines` citing `c`'s file say it was measured at, when every one of them
    says `measured at C` with C a commit the file names (one a prefix of the other) that this repository knows;
    [] when one does not, or when none of `lines` cites it."""
    named = [revision(n) for n in commits_of(root, c)]
    named = [n for n in named if known(root, n)]
    said: list[str] = []
    citing = [line for line in lines if is_cited(c.file, line)]
    for line in citing:
        match = [m for m in MEASURED_AT.findall(line) if any(n.startswith(m) or m.startswith(n) for n in named)]
        if not match:
            return []
        said += [m for m in match if m not in said]
    return said


def check(root: Path, entries: list[Cited]) -> tuple[list[str], list[str], str]:
    """(one line per stale cited file, one line per stale file cited as an earlier measurement, a one-line summary
    counting fresh, earlier and stale files). Only the first list fails the check. Entries whose file README.md and
    docs/ do not cite are not checked (they still say whose commits an input's are); a cited file with `skip` is
    counted in the summary."""
    text = citations(root)
    lines = prose_lines(root)
    cited = [c for c in entries if is_cited(c.file, text)]
    skipped = [c for c in cited if c.skip or not c.paths]
    checked = [c for c in cited if c not in skipped]
    index = {c.file: c for c in entries}
    stale, earlier = [], []
    for c in checked:
        why = why_stale(root, c, index)
        if why is None:
            continue
        said = cited_as_earlier(root, c, lines)
        if said:
            earlier.append(f"cited as earlier: {c.file} (measured at {', '.join(said)}; regenerate: {c.command})")
        else:
            stale.append(why)
    fresh = len(checked) - len(stale) - len(earlier)
    reasons = sorted({c.skip or "no paths declared" for c in skipped})
    skip_note = f"; {len(skipped)} skipped ({'; '.join(reasons)})" if skipped else ""
    earlier_note = f"{len(earlier)} cited as earlier measurements{skip_note}"
    if stale:
        return stale, earlier, (f"stale: {len(stale)} of {len(checked)} cited results files predate the code they "
                                f"measure without saying so; {fresh} fresh, {earlier_note}")
    return [], earlier, (f"stale: none; of {len(checked)} cited results files, {fresh} are as new as the code they "
                         f"measure, {earlier_note}")


def has_history(root: Path) -> bool:
    """Whether `root` is a git checkout with its history (a copy of the tree, as on the device machine, is not)."""
    return (root / ".git").exists() and git(root, "rev-parse", "--verify", "--quiet", "HEAD").returncode == 0
