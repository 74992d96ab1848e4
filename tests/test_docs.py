"""The documentation's commands run as printed: README.md and docs/*.md.

Every shell command a user can run sits in a ```bash block (fragments that cannot run as written sit
in ```text or ```yaml blocks). Here, in-process and without Ray:
- every `autospeed ...` line of a bash block (also `python -m autospeed ...`, or after `VAR=value`
  assignments) parses with the CLI's own argument parser;
- every search-space file in search_spaces/ and every one a bash block names validates
  (`autospeed validate --space FILE` exits 0);
- every recipe a bash block trains from a repository folder exists and loads;
- every relative link resolves to a file, and an anchor to a heading of that file.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from autospeed import cli
from autospeed.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
SPACE_PATH = re.compile(r"search_spaces/[\w.-]+\.ya?ml")


def _where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT)}:{line}"


def bash_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, command) for each command of each ```bash block, continuation lines joined."""
    found, in_bash, pending, start = [], False, "", 0
    for number, line in enumerate(path.read_text().splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            in_bash = not in_bash and stripped == "```bash"
            pending = ""
            continue
        if not in_bash:
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        found.append((start, pending + stripped))
        pending = ""
    return found


def autospeed_args(command: str) -> list[str] | None:
    """The arguments after `autospeed` (or `python -m autospeed`), or None for any other command."""
    words = shlex.split(command, comments=True)
    while words and ENV_ASSIGNMENT.match(words[0]):
        words = words[1:]
    if words[:1] == ["autospeed"]:
        return words[1:]
    if words[:3] == ["python", "-m", "autospeed"]:
        return words[3:]
    return None


COMMANDS = [(path, number, command, args) for path in DOCS for number, command in bash_lines(path)
            if (args := autospeed_args(command)) is not None]


def test_the_docs_hold_autospeed_commands():
    assert len(DOCS) > 1, "README.md and docs/*.md"
    files = {path.name for path, *_ in COMMANDS}
    assert "README.md" in files and len(COMMANDS) >= 10, files
    # the README's own first block: install, test, the main job
    first = [command for _, command in bash_lines(ROOT / "README.md")[:3]]
    assert first[0].startswith('python -m pip install -e ".[dev]"') and first[1].startswith("python -m pytest -q")
    assert first[2].startswith("autospeed search --space search_spaces/fast.yaml")


@pytest.mark.parametrize("path, number, command, args", COMMANDS,
                         ids=[_where(path, number) for path, number, *_ in COMMANDS])
def test_autospeed_command_parses(path, number, command, args):
    try:
        cli.build_parser().parse_args(cli.split_script_args(args)[0])
    except (UserError, SystemExit) as e:  # usage errors raise UserError; --help and the like SystemExit
        pytest.fail(f"{_where(path, number)}: `{command}` does not parse: {e}")


def _named_space_files() -> set[str]:
    named = set()
    for path in DOCS:
        for number, command in bash_lines(path):
            named.update(SPACE_PATH.findall(command))
            args = autospeed_args(command)
            if args and "--space" in args:
                named.add(args[args.index("--space") + 1])
    return named


SPACE_FILES = sorted({str(p.relative_to(ROOT)) for p in (ROOT / "search_spaces").glob("*.yaml")}
                     | _named_space_files())


@pytest.mark.parametrize("space", SPACE_FILES)
def test_space_file_validates(space, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert (ROOT / space).is_file(), f"a bash block names {space}, which does not exist"
    code = cli.main(["validate", "--space", space])
    out = capsys.readouterr()
    assert code == 0, f"autospeed validate --space {space} exited {code}: {out.err}"
    assert f"{space}: ok" in out.out


def _repository_recipes() -> list[tuple[str, str]]:
    """(where, path) of each `autospeed train --config PATH` whose PATH lies in a repository folder."""
    found = []
    for path in DOCS:
        for number, command in bash_lines(path):
            args = autospeed_args(command)
            if args and args[:1] == ["train"] and "--config" in args:
                config = Path(args[args.index("--config") + 1])
                if len(config.parts) > 1 and (ROOT / config.parts[0]).is_dir():
                    found.append((_where(path, number), str(config)))
    return found


@pytest.mark.parametrize("where, config", _repository_recipes())
def test_recipe_in_the_repository_loads(where, config):
    from autospeed.recipe import load_recipe

    assert (ROOT / config).is_file(), f"{where}: {config} does not exist"
    load_recipe(ROOT / config)


# ---------------------------------------------------------------- links
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")  # links and images


def _prose(text: str) -> str:
    """The text outside fenced code blocks and inline code (whose brackets are not links)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)
    return re.sub(r"`[^`\n]*`", "", text)


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors of a Markdown file."""
    anchors, seen = set(), {}
    outside_code = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.DOTALL | re.MULTILINE)
    for heading in re.findall(r"^#{1,6} +(.+?) *$", outside_code, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower()).replace(" ", "-")
        anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


LINKS = [(path, target) for path in DOCS for target in LINK.findall(_prose(path.read_text()))
         if not re.match(r"^[a-z]+:", target)]  # not http:, https:, mailto:


@pytest.mark.parametrize("path, target", LINKS, ids=[f"{p.name}: {t}" for p, t in LINKS])
def test_relative_link_resolves(path, target):
    file, _, anchor = target.partition("#")
    resolved = (path.parent / file).resolve() if file else path
    assert resolved.exists(), f"{path.relative_to(ROOT)}: link {target} points at nothing"
    if anchor and resolved.suffix == ".md":
        assert anchor in _anchors(resolved), f"{path.relative_to(ROOT)}: no heading #{anchor} in {file or path.name}"


# ---------------------------------------------------------------- cited figures = their results files
# A figure: a decimal (4.81, 0.16) or a whole number of two digits or more (53, 1348, 8,437; one digit is too common
# to tell anything), maybe with a unit (4.81x, 12s, 14.4 us, 36.8%), not part of a version (2.14.1), a word or a
# commit (v3, 8f1d890, 805363b), an issue (pytorch#169545) or a larger number (15.59 is not 5.59).
_NUMBER = re.compile(r"(?<![\w.,#])(?:\d{1,3}(?:,\d{3})+|\d+\.\d+|\d{2,})(?=(?:x|s|ms|us|MB|GB)?\b)(?!\.\d|,\d)")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")  # 8,437 is 8437
_RESULTS_LINK = re.compile(r"\]\(((?:\.\./)?experiments/results/[^)#]+)(?:#[^)]*)?\)")


def _whole(figure: str, text: str) -> bool:
    """`figure` occurs in `text` as a whole number: 5.59 in 'x 5.59x' and '(5.59)', not in '15.59' or '5.590' (a figure
    is quoted at its file's precision); 12 in '12 trials' and 'run 12.', not in '512' or '12.4'."""
    figure, text = _THOUSANDS.sub("", figure), _THOUSANDS.sub("", text)
    return re.search(rf"(?<![\d.]){re.escape(figure)}(?!\d|\.\d)", text) is not None


def _cited_figures(page: Path) -> list[tuple[int, str, str, list[Path]]]:
    """(line number, figure, the line, the results files it cites) for every figure of a line of `page` that
    cites a results file: the result column of a table row, else the line without its links."""
    out = []
    for number, line in enumerate(page.read_text().splitlines(), 1):
        files = [(page.parent / f).resolve() for f in _RESULTS_LINK.findall(line)]
        if not files:
            continue
        cells = line.split("|")
        text = cells[3] if line.startswith("|") and len(cells) > 4 else _RESULTS_LINK.sub("", line)
        text = re.sub(r"\[[^\]]*\]", "", re.sub(r"`[^`]*`", "", text))  # commands and link texts name, not measure
        text = re.sub(r"[<>]=?\s*\d+(?:\.\d+)?", "", text)  # a goal or a bound (rho >= 0.8) is set, not measured
        out += [(number, figure, line, files) for figure in _NUMBER.findall(text)]
    return out


def _texts(cited: Path) -> list[str]:
    """The text of a cited results file, or of every file in a cited folder (gpu/quick/: its summaries)."""
    if cited.is_dir():
        return [p.read_text(errors="replace") for p in sorted(cited.iterdir()) if p.is_file()]
    return [cited.read_text(errors="replace")] if cited.is_file() else []


@pytest.mark.parametrize("page", ["README.md", "docs/results.md"])
def test_every_cited_figure_is_in_the_results_file_it_cites(page):
    """A number beside a results file's link comes from that file (or a file of a linked folder), as a whole
    number: regenerating a file and not the page (or the reverse) fails here, and so does a figure derived on the
    page (a ratio, a rounding): what a line shows, its file says."""
    figures = _cited_figures(ROOT / page)
    assert len(figures) >= 15  # the Results table, the example, the results page are read
    stale = [f"{page}:{n}: {figure} not in {', '.join(p.name for p in files)}"
             for n, figure, line, files in figures
             if not any(_whole(figure, text) for p in files for text in _texts(p))]
    assert not stale, "\n".join(stale)


def test_a_figure_counts_only_as_a_whole_number():
    """The check's own matcher: 5.59 is not in 15.59 or 5.590, 12 is not in 512 or 12.4; integers count too."""
    assert _whole("5.59", "speed-up 5.59x") and _whole("5.59", "(5.59)") and not _whole("5.59", "15.59")
    assert not _whole("5.59", "5.590") and not _whole("12", "512") and not _whole("12", "12.4")
    assert _whole("12", "12 trials") and _whole("12", "run 12.") and _whole("0.94", "0.94 s")
    assert not _whole("0.94", "10.94")
    assert _NUMBER.findall("15.59 s, 12 trials, torch 2.14.1, v3, 8f1d890, 805363b, 7/7, 0.9") == ["15.59", "12", "0.9"]
    assert _NUMBER.findall("4.81x, 1.55-1.69x, 12s, 14.4 us, 36.8%, 8,437 windows, pytorch#169545") == [
        "4.81", "1.55", "1.69", "12", "14.4", "36.8", "8,437"]
    assert _whole("8,437", "8437 windows") and _whole("15258", "15,258 samples/s")


def test_the_readme_example_output_is_the_results_files():
    """The 30-second example's output block is copied from example_smoke.md, line for line."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## A 30-second example", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    # the example ran in an empty temporary folder: the README shows paths relative to it
    source = re.sub(r"/tmp/autospeed-example-\w+/", "", (ROOT / "experiments/results/example_smoke.md").read_text())
    def found(line: str) -> bool:  # `<search id>` stands for the search's id; a trailing ... elides the rest
        pattern = re.escape(line.strip().removesuffix("...").rstrip()).replace(re.escape("<search id>"), r"[\w-]+")
        return re.search(pattern, source) is not None

    missing = [line for line in block.splitlines() if line.strip() not in ("", "...") and not found(line)]
    assert not missing, missing


_DESIGN_CITE = re.compile(r'design\.md\)?"? "([^"]+)"')


def test_every_cited_design_section_is_in_docs_design_md():
    """Code and docs cite docs/design.md's sections by name (`docs/design.md "Long jobs"`): each must name the start
    of one of its headings, so a reader of a clone can follow it."""
    headings = [line.lstrip("#").strip() for line in (ROOT / "docs/design.md").read_text().splitlines()
                if line.startswith("## ")]
    cited = {}
    for path in [*ROOT.glob("autospeed/**/*.py"), *ROOT.glob("tests/**/*.py"), *ROOT.glob("experiments/*.py"),
                 *ROOT.glob("docs/*.md"), ROOT / "README.md"]:
        if path.name == "design.md":  # its header shows the form, citing no section
            continue
        for name in _DESIGN_CITE.findall(path.read_text()):  # a name wrapped over lines (in a comment too): joined
            cited.setdefault(re.sub(r"\s*\n\s*#?\s*", " ", name), path.relative_to(ROOT))
    assert len(cited) >= 10
    missing = {name: str(where) for name, where in cited.items() if not any(h.startswith(name) for h in headings)}
    assert not missing, missing
