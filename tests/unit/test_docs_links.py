"""The handbook stays navigable: every relative link in README.md and docs/**/*.md names a file that
exists (no anchors: headings move, files stay), README.md stays a front page (at most 200 lines,
the CI's command at the top), and no tracked file points outside the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 200
# The background notes beside the repository, spelled in parts so that this file names neither
# and the check covers it too.
FORBIDDEN = ("DESIGN" + ".md", ".." + "/shared")

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_INLINE_LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]\n]+\]:\s*<?(\S+?)>?(?:\s.*)?$", re.MULTILINE)
_EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def relative_links(text: str) -> list[str]:
    """The link targets of `text` that are not URLs, outside code blocks and code spans."""
    prose = _CODE_SPAN.sub("", _FENCE.sub("", text))
    targets = _INLINE_LINK.findall(prose) + _REFERENCE_DEF.findall(prose)
    return [t for t in targets if not _EXTERNAL.match(t)]


def link_problem(source: Path, target: str) -> str | None:
    """Why `target`, linked from `source`, is not a link to a file of the repository (None: it is)."""
    if "#" in target:
        return "has an anchor (link the file; headings get renamed)"
    resolved = (source.parent / target).resolve()
    if not resolved.is_relative_to(ROOT):
        return "points outside the repository"
    if resolved.is_file():
        return None
    return "is a directory, not a file" if resolved.is_dir() else "does not exist"


def test_the_link_parser_finds_links_and_skips_code_and_urls() -> None:
    text = ("See [a](docs/a.md) and ![plot](x.png), [web](https://example.org) and `[no](code.md)`.\n"
            "```\n[not](in-a-fence.md)\n```\n[ref]: results/b.md\n")
    assert relative_links(text) == ["docs/a.md", "x.png", "results/b.md"]


def test_link_problems_are_named() -> None:
    source = ROOT / "docs" / "operations.md"
    assert link_problem(source, "install.md") is None
    assert link_problem(source, "install.md#top") is not None
    assert link_problem(source, "no-such-page.md") == "does not exist"
    assert link_problem(source, "results") == "is a directory, not a file"
    assert link_problem(source, "../../outside.md") == "points outside the repository"


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_names_an_existing_file(path: Path) -> None:
    problems = [f"{target}: {problem}" for target in relative_links(path.read_text(encoding="utf-8"))
                if (problem := link_problem(path, target)) is not None]
    assert problems == [], f"{path.relative_to(ROOT)}: bad links:\n" + "\n".join(problems)


def test_readme_is_a_front_page() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail to docs/"
    # The commands at the top are the ones CI runs (.ci/run ends with the test command).
    top = "\n".join(lines[:8])
    assert "./dev demo" in top and "./dev test" in top
    assert "./dev test" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def tracked_files() -> list[Path]:
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / name for name in listed.decode().split("\0") if name]


def test_no_tracked_file_refers_outside_the_repository() -> None:
    offenders = []
    for path in tracked_files():
        if not path.is_file():
            continue
        data = path.read_bytes()
        offenders += [f"{path.relative_to(ROOT)}: {word}" for word in FORBIDDEN if word.encode() in data]
    assert offenders == [], "files that refer to a document outside the repository:\n" + "\n".join(offenders)
