"""README.md and docs/*.md as the docs tests read them (tests/docs/test_pages.py, tests/docs/test_references.py).

A page is cut into its fenced blocks and its prose. Both keep the page's line numbers (the prose has
each block blanked out line for line), so that a check can name the page and the line of every
culprit it finds."""
import glob
import os
import re
from typing import NamedTuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md"] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
SHELL_BLOCKS = ("sh", "bash", "shell", "console")
FENCE = re.compile(r"^[ \t]*```(\w*)\n(.*?)^[ \t]*```", re.S | re.M)      # indented too: a block in a list


class Block(NamedTuple):
    """A fenced block: its language ("" for a drawing or a sample of output), the page's line number
    of its first line (the one after the fence) and its text."""
    lang: str
    line: int
    body: str


def read(page: str) -> str:
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        return f.read()


def line_of(text: str, offset: int, first_line: int = 1) -> int:
    """The line number of `offset` in `text`, whose first line is `first_line`."""
    return first_line + text.count("\n", 0, offset)


def blocks(text: str) -> list:
    """Every fenced block of a page, as a Block."""
    return [Block(m.group(1), line_of(text, m.start(2)), m.group(2)) for m in FENCE.finditer(text)]


def prose(text: str) -> str:
    """The text outside fenced blocks, each block replaced by as many empty lines (offsets in it are
    not the page's, but its line numbers are)."""
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def inline_code(text: str) -> list:
    """(line, span) for each `span` of the prose, a span broken over two lines joined again."""
    body = prose(text)
    return [(line_of(body, m.start()), " ".join(m.group(1).split())) for m in re.finditer(r"`([^`]+)`", body)]


def matches(pattern: re.Pattern, text: str, first_line: int = 1):
    """(line, match) of every match of `pattern` in `text`."""
    return [(line_of(text, m.start(), first_line), m) for m in pattern.finditer(text)]
