"""The documentation (README.md and docs/*.md) points at files that exist and shows commands
that parse.

Links: every Markdown link `[text](target)` or image `![alt](target)` in the text, and every
reference definition `[label]: target`, whose target is relative (no scheme such as `https:` or
`mailto:`) must point to a file or folder that exists, relative to the page (a target starting with
`/` is relative to the repository), inside the repository. A link with an anchor
(`page.md#section`) is checked for its file part; a link to an anchor of the page itself
(`#section`) is not checked. Links inside code (fenced blocks, inline code) are not links.

Commands: every `emulate ...` command shown is parsed with the CLI's own parser,
emulator.cli.build_parser(), and never run. Which text is a command:
- in a fenced code block labelled `sh`, `bash`, `shell`, `console` or not labelled, each line
  whose first word is `emulate`, after an optional `$ ` prompt, `sudo` and `NAME=value`
  assignments; a `#` comment ends it, a trailing backslash continues it on the next line, and a
  shell operator (`|`, `&&`, `;`, `>`, ...) ends the command. A line whose second word ends with
  `:` is the CLI's own output (`emulate run: 16 ranks, ...`), not a command. Other blocks (yaml,
  ...) hold no commands;
- in the text (tables included), every inline code span that starts with the word `emulate` and
  a space (a span may run over a line break). The bare word `emulate` is prose. A span whose
  last word is an option that takes a value (`emulate run --backend`) names that option in
  prose: the option must exist for that command, and the rest must parse.
How a shown command is read:
- square brackets mark optional parts, as in a usage line: `emulate report DIR [--csv]` is parsed
  as `emulate report DIR --csv`;
- a word in capitals (SCENARIO, DIR, N, X, PATH...) is a placeholder and parses as any value, a
  number included (`--seeds N`); choices must be real (a subcommand, `--backend sim`);
- shell variables (`$T`) and globs parse as the words they are.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from emulator.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)")
SHELL_BLOCKS = {"", "sh", "bash", "shell", "console"}
INLINE_CODE = re.compile(r"(?<!`)`([^`\n]+(?:\n[^`\n]+)*)`(?!`)")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.MULTILINE)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*(\.\.\.)?")
SHELL_OPERATORS = {"|", "||", "&&", ";", "&", ">", ">>", "<", "2>", "2>&1", "&>"}


@dataclass(frozen=True)
class Shown:
    """A command as a page shows it: the page, its line, the text, whether inline."""

    page: Path
    line: int
    text: str
    inline: bool

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}: {self.text}"


def split_code(text: str) -> tuple[str, list[tuple[int, str, str]]]:
    """The page's text with its fenced code blocks blanked out (line numbers kept), and each
    block's lines as (line number, block label, line)."""
    prose: list[str] = []
    blocks: list[tuple[int, str, str]] = []
    fence: str | None = None
    label = ""
    for number, line in enumerate(text.splitlines(), 1):
        opened = FENCE.match(line)
        if fence is None and opened:
            fence, label = opened.group(1), opened.group(2).lower()
            prose.append("")
        elif fence is not None and line.strip().startswith(fence[0] * len(fence)):
            fence = None
            prose.append("")
        elif fence is not None:
            blocks.append((number, label, line))
            prose.append("")
        else:
            prose.append(line)
    return "\n".join(prose), blocks


def without_inline_code(prose: str) -> str:
    return INLINE_CODE.sub(lambda m: " " * len(m.group(0)), prose)


def links(page: Path) -> Iterator[tuple[int, str]]:
    """(line, target) of every link and reference definition outside code."""
    prose = without_inline_code(split_code(page.read_text())[0])
    for found in (*LINK.finditer(prose), *REFERENCE.finditer(prose)):
        yield prose.count("\n", 0, found.start()) + 1, found.group(1)


def broken_link(page: Path, target: str, root: Path = ROOT) -> str | None:
    """Why a link's target is wrong, or None when it is fine or not checked; `root`: the
    repository's folder."""
    if SCHEME.match(target):
        return None
    path = unquote(target.split("#", 1)[0].split("?", 1)[0])
    if not path:
        return None  # an anchor of the page itself
    resolved = (root / path.lstrip("/")) if path.startswith("/") else (page.parent / path)
    resolved = resolved.resolve()
    if not resolved.is_relative_to(root.resolve()):
        return "points outside the repository"
    if not resolved.exists():
        return "no such file"
    return None


def shell_words(text: str) -> list[str]:
    words = shlex.split(text, comments=True)
    for i, word in enumerate(words):
        if word in SHELL_OPERATORS:
            return words[:i]
    return words


def block_commands(page: Path, blocks: list[tuple[int, str, str]]) -> Iterator[Shown]:
    pending = ""
    start = 0
    for number, label, line in blocks:
        if label not in SHELL_BLOCKS:
            continue
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        text, pending = pending + line, ""
        stripped = text.strip().removeprefix("$ ")
        try:
            words = shell_words(stripped)
        except ValueError:
            continue  # not shell (an unbalanced quote in output)
        while words and (words[0] == "sudo" or ASSIGNMENT.match(words[0])):
            words = words[1:]
        if not words or words[0] != "emulate":
            continue
        if len(words) > 1 and words[1].endswith(":"):
            continue  # the CLI's own output
        yield Shown(page, start, " ".join(words), inline=False)


def inline_commands(page: Path, prose: str) -> Iterator[Shown]:
    for found in INLINE_CODE.finditer(prose):
        text = " ".join(found.group(1).split())
        if text.startswith("emulate "):
            yield Shown(page, prose.count("\n", 0, found.start()) + 1, text, inline=True)


def commands(page: Path) -> list[Shown]:
    prose, blocks = split_code(page.read_text())
    return [*block_commands(page, blocks), *inline_commands(page, prose)]


def _placeholder_or(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    @functools.wraps(convert)
    def parse(value: str) -> Any:
        return value if PLACEHOLDER.fullmatch(value) else convert(value)

    return parse


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _accept_placeholders(parser: argparse.ArgumentParser) -> None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in {id(p): p for p in action.choices.values()}.values():
                _accept_placeholders(sub)
        elif callable(action.type):
            action.type = _placeholder_or(action.type)


@functools.cache
def docs_parser() -> argparse.ArgumentParser:
    """The CLI's parser, its typed arguments also taking placeholders."""
    parser = build_parser()
    _accept_placeholders(parser)
    return parser


def parse_error(shown: Shown) -> str | None:
    """Why the CLI's parser refuses the shown command, or None when it parses."""
    words = shlex.split(shown.text)[1:]
    words = [w for w in (w.lstrip("[").rstrip("]") for w in words) if w]
    parser = docs_parser()
    if shown.inline and words and words[-1].startswith("-"):
        command = parser
        for word in words[:-1]:
            command = _subparsers(command).get(word, command)
        action = command._option_string_actions.get(words[-1])
        if action is None:
            return f"{command.prog} has no option {words[-1]}"
        if action.nargs != 0:  # it takes a value the text does not show
            words.pop()
    out = io.StringIO()
    try:
        with contextlib.redirect_stderr(out), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(words)
    except SystemExit as stop:
        if stop.code not in (0, None):
            return out.getvalue().strip().splitlines()[-1]
    return None


def _ids(pages: list[Path]) -> list[str]:
    return [str(p.relative_to(ROOT)) for p in pages]


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_relative_links_point_to_files_that_exist(page: Path) -> None:
    broken = [
        f"{page.relative_to(ROOT)}:{line}: {target}: {why}"
        for line, target in links(page)
        if (why := broken_link(page, target))
    ]
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_emulate_commands_shown_parse(page: Path) -> None:
    refused = [f"{s.where()}\n    {why}" for s in commands(page) if (why := parse_error(s))]
    assert not refused, "\n".join(refused)


def test_the_readme_shows_commands_and_links() -> None:
    """The checks above see what the README shows (they would pass on a page they cannot read)."""
    readme = ROOT / "README.md"
    shown = {s.text for s in commands(readme)}
    assert "emulate run scenarios/moe_mix.yaml" in shown
    assert "emulate report DIR [--csv]" in shown
    assert "docs/results.md" in {target for _, target in links(readme)}


def _shown(text: str, inline: bool = True) -> Shown:
    return Shown(ROOT / "README.md", 1, text, inline)


@pytest.mark.parametrize(
    "text",
    [
        "emulate run SCENARIO --seeds N",  # a placeholder where an int is wanted
        "emulate run --trace $T --fabric clos:hosts_per_leaf=4,leaves=2,spines=2",
        "emulate report DIR [--csv]",
        "emulate clean [--state-dir DIR]",
        "emulate validate PATH... [--json]",
        "emulate run --backend",  # an option named in prose
        "emulate generate moe_mix --help",
        "emulate study interference --tdf 16000 --repeats 3",
    ],
)
def test_what_parses(text: str) -> None:
    assert parse_error(_shown(text)) is None


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("emulate run SCENARIO --seeds three", "invalid int value"),
        ("emulate rerun SCENARIO", "invalid choice"),
        ("emulate run SCENARIO --backend BACKEND", "invalid choice"),
        ("emulate study SCENARIO", "invalid choice"),
        ("emulate report DIR --csv EXTRA", "unrecognized arguments"),
        ("emulate run --no-such-option", "has no option --no-such-option"),
    ],
)
def test_what_does_not_parse(text: str, why: str) -> None:
    error = parse_error(_shown(text))
    assert error is not None and why in error


def test_commands_in_blocks_and_text(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Run `emulate run X --tdf 2` or `emulate` alone; not `python -m emulate`.\n"
        "```sh\n"
        "$ sudo RAY_AUTH_MODE=token emulate run A \\\n"
        "    --tdf 3   # a comment\n"
        "emulate run: 16 ranks, 80 collectives\n"
        "emulate report B | tee out.txt\n"
        "T=x\n"
        "```\n"
        "```yaml\nemulate: not a command\n```\n"
    )
    found = [(s.line, s.text, s.inline) for s in commands(page)]
    assert found == [
        (3, "emulate run A --tdf 3", False),
        (6, "emulate report B", False),
        (1, "emulate run X --tdf 2", True),
    ]


def test_links_outside_code(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("")
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "[a](../there.md#x) [b](missing.md) [c](#here) [d](https://example.com/x.md)\n"
        "[e](/there.md) [f](../../outside.md)\n"
        "`[g](in-code.md)`\n```\n[h](in-block.md)\n```\n[i]: also-missing.md\n"
    )
    checked = {t: broken_link(page, t, root=tmp_path) for _, t in links(page)}
    assert checked == {
        "../there.md#x": None,
        "missing.md": "no such file",
        "#here": None,
        "https://example.com/x.md": None,
        "/there.md": None,
        "../../outside.md": "points outside the repository",
        "also-missing.md": "no such file",
    }
