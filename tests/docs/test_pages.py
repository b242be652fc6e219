"""The pages keep their word: README.md and docs/*.md.

- Every `batchd ...` command a page shows, in a shell block or in inline code, names a real verb and
  only options that verb's parser accepts (batchd's own parser, `build_parser()`).
- Every relative link reaches a file, and with `#anchor`, one of that page's headings.

What the pages name of the code (paths, modules, settings, the middleware chain) is held to it in
tests/docs/test_references.py. The checks take a page's text, so the last tests can show that each one
catches what it is for."""
import argparse
import os
import re
import shlex

import pytest

from batchd.cli.main import build_parser
from pages import PAGES, ROOT, SHELL_BLOCKS, blocks, inline_code, prose, read


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
    shown = [c for block in blocks(text) if block.lang in SHELL_BLOCKS for c in shell_commands(block.body)]
    shown += [span for _, span in inline_code(text) if re.match(r"(\S*/)?batchd ", span)]
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
                        "batchd tasks adds: no such verb (there are add, import, import-sitemap)",
                        "batchd statuz: no such verb (there are " + ", ".join(subcommands(build_parser())) + ")",
                        "batchd failed has no option --reasons"]


def test_the_link_check_fails_on_a_missing_page_or_heading():
    page = "# Top\n\n## The `batchd` command\n\n[a](#the-batchd-command) [b](#nowhere) [c](settings.md#settings) " \
           "[d](nothing.md) [e](../README.md#quick-start) [f](../README.md#slow-start) [g](https://example.com/)\n"
    assert link_problems("docs/page.md", page) == ["#nowhere: no heading #nowhere in docs/page.md",
                                                   "nothing.md: no file docs/nothing.md",
                                                   "../README.md#slow-start: no heading #slow-start in README.md"]
