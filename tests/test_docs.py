"""The pages keep their word: README.md and docs/*.md.

- Every `batchd ...` command a page shows, in a shell block or in inline code, names a real verb and
  only options that verb's parser accepts (batchd's own parser, `build_parser()`).
- Every CAPS name a page shows in backticks is a declared setting, `BATCHD_` and a setting, or a
  name batchd's code defines or reads (an environment variable, a journal field, an enum member, a
  constant); every key of a TOML block is a setting.
- Every relative link reaches a file, and with `#anchor`, one of that page's headings.

The checks take a page's text, so the last tests can show that each one catches what it is for."""
import argparse
import dataclasses
import functools
import glob
import os
import re
import shlex

import pytest

from batchd.cli.main import build_parser
from batchd.config import Settings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md"] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
SETTINGS = {f.name for f in dataclasses.fields(Settings)}
# Words of the systems around batchd that pages quote in CAPS: SQL's UNIQUE index and JSON column type,
# Redis's TIME command.
FOREIGN_WORDS = {"UNIQUE", "JSON", "TIME"}
SHELL_BLOCKS = ("sh", "bash", "shell", "console")
# A name with an underscore wherever it stands in a span, or a whole span that is one CAPS word (with
# `= value` after it, as a page shows a setting being set).
CAPS_NAME = re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b")
CAPS_SPAN = re.compile(r"([A-Z][A-Z0-9]*)(?:\s*=.*)?")


def read(page: str) -> str:
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        return f.read()


def blocks(text: str) -> list:
    """(language, body) of each fenced block."""
    return re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)


def prose(text: str) -> str:
    """The text outside fenced blocks."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def inline_code(text: str) -> list:
    """Each `span` of the prose, a span broken over two lines joined again."""
    return [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose(text))]


# -- commands ---------------------------------------------------------------------------------------

def shell_commands(body: str) -> list:
    """The simple commands of a shell block: comments dropped, lines split at && || ; | &."""
    commands = []
    for line in body.splitlines():
        line = re.split(r"(?:^|\s)#", line, maxsplit=1)[0]
        commands += [c.strip() for c in re.split(r"&&|\|\||[;|&]", line) if c.strip()]
    return commands


def batchd_arguments(command: str):
    """The words after `batchd` (or .venv/bin/batchd, python -m batchd), or None for another program.
    Placeholders go: `[--json]` is `--json`, `[N]` is `N`, and `...` is dropped."""
    words = command.split()
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S*", words[0]):   # NAME=value before it
        words.pop(0)
    if len(words) >= 3 and re.fullmatch(r"(\S*/)?python3?", words[0]) and words[1:3] == ["-m", "batchd"]:
        words = words[2:]
    if not words or os.path.basename(words[0]) != "batchd":
        return None
    args = shlex.split(" ".join(words[1:]).replace("[", " ").replace("]", " "))
    return [a for a in args if a != "..."]


def page_commands(text: str) -> list:
    """The argument lists of every batchd command the page shows."""
    shown = [c for lang, body in blocks(text) if lang in SHELL_BLOCKS for c in shell_commands(body)]
    shown += [span for span in inline_code(text) if re.match(r"(\S*/)?batchd ", span)]
    return [(command, args) for command in shown if (args := batchd_arguments(command)) is not None]


def subcommands(parser: argparse.ArgumentParser) -> dict:
    # argparse has no public way to list a parser's verbs or options: read what add_parser and
    # add_argument recorded.
    return {name: sub for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name, sub in action.choices.items()}


def walk(args: list) -> tuple:
    """The verb `batchd ARGS` names (["tasks", "add"]), and what is wrong with it as a page shows it:
    an unknown verb, an option its parser lacks."""
    parser, verb, problems = build_parser(), [], []
    for arg in args:
        if arg.startswith("-"):
            option = arg.split("=", 1)[0]
            if option not in parser._option_string_actions:
                problems.append(f"batchd {' '.join(verb) or '(no verb)'} has no option {option}")
            continue
        verbs = subcommands(parser)
        if not verbs:
            continue                     # an argument of the verb: a spider, a file, a value
        if arg not in verbs:
            return verb, problems + [f"batchd {' '.join(verb + [arg])}: no such verb (there are {', '.join(verbs)})"]
        parser, verb = verbs[arg], verb + [arg]
    return verb, problems      # a verb group alone (`batchd tasks`) names the group: no problem


def all_verbs(parser=None, above=()) -> set:
    found = set()
    for name, sub in subcommands(parser or build_parser()).items():
        found |= all_verbs(sub, above + (name,)) or {above + (name,)}
    return found


@pytest.mark.parametrize("page", PAGES)
def test_every_batchd_command_a_page_shows_has_a_real_verb_and_options(page):
    problems = [f"{command}: {p}" for command, args in page_commands(read(page)) for p in walk(args)[1]]
    assert not problems, "\n".join(problems)


def test_the_pages_show_every_verb():
    """A check that finds no commands passes for nothing: together the pages show every verb."""
    shown = {tuple(walk(args)[0]) for page in PAGES for _, args in page_commands(read(page))}
    assert all_verbs() - shown == set()


# -- setting names ----------------------------------------------------------------------------------

@functools.cache
def code() -> str:
    """batchd's source, the tests' conftest (which reads TEST_MYSQL_URL and TEST_REDIS_URL) and the
    test command (which reads TEST_WORKERS)."""
    files = glob.glob(os.path.join(ROOT, "batchd", "**", "*.py"), recursive=True)
    files += [os.path.join(ROOT, "tests", "conftest.py"), os.path.join(ROOT, "tests", "run-suites")]
    return "\n".join(open(f, encoding="utf-8").read() for f in files)


def known_name(name: str) -> bool:
    """A setting, BATCHD_ and a setting, a foreign word, or a name the code reads as a string
    ("STATE_DIRECTORY") or defines: `NAME = ...`, `NAME: type = ...`, `record.NAME = ...` (constants,
    enum members, journal fields), or a variable the shell reads (`${NAME:-default}`)."""
    return (name in SETTINGS or name.removeprefix("BATCHD_") in SETTINGS or name in FOREIGN_WORDS
            or re.search(rf"[\"']{name}[\"']|\b{name}\s*(?::[^=\n]*)?=(?!=)|\$\{{{name}\b", code()) is not None)


def page_caps_names(text: str) -> set:
    names = set()
    for span in inline_code(text):
        names |= set(CAPS_NAME.findall(span))
        if whole := CAPS_SPAN.fullmatch(span):
            names.add(whole.group(1))
    for lang, body in blocks(text):
        if lang in SHELL_BLOCKS:
            names |= set(re.findall(r"\bBATCHD_[A-Z0-9_]+", body))
    return names


def toml_keys(text: str) -> set:
    return {m for lang, body in blocks(text) if lang == "toml"
            for m in re.findall(r"^([A-Z][A-Z0-9_]*)\s*=", body, re.M)}


def name_problems(text: str) -> list:
    unknown = sorted(n for n in page_caps_names(text) if not known_name(n))
    return [f"`{n}` is no setting nor a name batchd knows" for n in unknown] + \
           [f"TOML key {n} is no setting" for n in sorted(toml_keys(text) - SETTINGS)]


@pytest.mark.parametrize("page", PAGES)
def test_every_caps_name_a_page_shows_is_a_setting_or_a_name_batchd_knows(page):
    problems = name_problems(read(page))
    assert not problems, "\n".join(problems)


# -- links ------------------------------------------------------------------------------------------

def anchors(text: str) -> set:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces as hyphens,
    and -1, -2 ... after a heading's repeats."""
    found, times = set(), {}
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", prose(text), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        times[slug] = times.get(slug, 0) + 1
        found.add(slug if times[slug] == 1 else f"{slug}-{times[slug] - 1}")
    return found


def link_problems(page: str, text: str) -> list:
    problems = []
    for target in re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", prose(text)):
        if re.match(r"[a-z]+:", target):
            continue                                           # https:, mailto:
        path, _, anchor = target.partition("#")
        name = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        if path and not os.path.exists(os.path.join(ROOT, name)):
            problems.append(f"{target}: no file {name}")
        elif anchor and anchor not in anchors(read(name) if path else text):
            problems.append(f"{target}: no heading #{anchor} in {name}")
    return problems


@pytest.mark.parametrize("page", PAGES)
def test_every_link_between_pages_reaches_a_file_and_a_heading(page):
    problems = link_problems(page, read(page))
    assert not problems, "\n".join(problems)


def test_the_readme_links_every_guide_page():
    linked = {os.path.normpath(t.partition("#")[0]) for t in re.findall(r"\]\(([^)\s]+)\)", read("README.md"))}
    assert set(PAGES) - {"README.md"} - linked == set()


# -- the checks catch what they are for -------------------------------------------------------------

def test_the_command_check_fails_on_a_verb_or_option_that_does_not_exist():
    page = ("Run `batchd statuz crawl.py:Crawl` or `batchd failed --reasons 404`.\n\n```sh\n"
            ".venv/bin/batchd run crawl.py:Crawl --wrokers 4   # a typo\nbatchd tasks adds https://example.com/\n"
            "batchd status [--json]\n```\n")
    problems = [p for _, args in page_commands(page) for p in walk(args)[1]]
    assert problems == ["batchd run has no option --wrokers",
                        "batchd tasks adds: no such verb (there are add, import)",
                        "batchd statuz: no such verb (there are " + ", ".join(subcommands(build_parser())) + ")",
                        "batchd failed has no option --reasons"]


def test_the_name_check_fails_on_a_setting_that_is_not_declared():
    page = ("Set `DOWNLOAD_DELAYS = 1`, `WORKER`, `BATCHD_SPIDERS`, `WORKERS` and `BATCHD_CONFIG`.\n\n"
            "```toml\nTHREADS = 4\nWORKERS = 2\n```\n")
    assert name_problems(page) == ["`BATCHD_SPIDERS` is no setting nor a name batchd knows",
                                   "`DOWNLOAD_DELAYS` is no setting nor a name batchd knows",
                                   "`WORKER` is no setting nor a name batchd knows",
                                   "TOML key THREADS is no setting"]


def test_the_link_check_fails_on_a_missing_page_or_heading():
    page = "# Top\n\n## The `batchd` command\n\n[a](#the-batchd-command) [b](#nowhere) [c](settings.md#settings) " \
           "[d](nothing.md) [e](../README.md#quick-start) [f](../README.md#slow-start) [g](https://example.com/)\n"
    assert link_problems("docs/page.md", page) == ["#nowhere: no heading #nowhere in docs/page.md",
                                                   "nothing.md: no file docs/nothing.md",
                                                   "../README.md#slow-start: no heading #slow-start in README.md"]
