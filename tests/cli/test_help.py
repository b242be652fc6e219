"""One style of help (issue 34, point 8): every verb's --help has its one-line summary, its arguments in one
order and the shared ones in one wording, an example that parses, and the exit codes it can return, each one
docs/architecture.md documents; `batchd --help` groups the verbs as README.md does; `tasks add|import` take
SPIDER as the other verbs do, and the old `--spider` still works; a usage error is one line, exit 2."""
import argparse
import os
import re
import shlex
import subprocess
import sys

import pytest

from batchd.cli.arguments import EXIT_CODES_TITLE, HELP_WIDTH, SPIDER_HELP
from batchd.cli.main import SECTIONS, VERBS, build_parser, main
from batchd.cli.project import TASKS
from procs import ROOT
from supervised import SEED, batchd

SHARED = ("SPIDER", "--config", "--store", "--batch", "--json", "--workers")


def documented_exit_codes() -> set:
    with open(os.path.join(ROOT, "docs", "architecture.md"), encoding="utf-8") as f:
        section = f.read().split("\n## Exit codes\n")[1].split("\n## ")[0]
    return {int(code) for code in re.findall(r"^\| (\d+) \|", section, re.MULTILINE)}


def verb_parsers() -> dict:
    """{'status': its parser, ..., 'tasks add': ..., 'tasks import': ...}: every parser below `batchd`."""
    found = {}

    def walk(parser: argparse.ArgumentParser, path: tuple) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found[" ".join(path + (name,))] = sub
                    walk(sub, path + (name,))
    walk(build_parser(), ())
    return found


def entries() -> dict:
    return {**VERBS, **{f"tasks {entry.name}": entry for entry in TASKS}}


def help_of(parser: argparse.ArgumentParser, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "100")
    return parser.format_help()


def test_every_verb_has_a_summary_an_example_and_its_exit_codes(monkeypatch):
    parsers, documented = verb_parsers(), documented_exit_codes()
    assert set(parsers) == set(entries()) and {"tasks add", "tasks import"} <= set(parsers)
    for name, parser in parsers.items():
        entry, text = entries()[name], help_of(parser, monkeypatch)
        # The summary: one line, as `batchd --help` lists it too (the widest name and its indent beside it).
        assert len(entry.help) <= HELP_WIDTH - max(map(len, VERBS)) - 4, name
        assert text.split("\n\n")[1] == entry.help, name
        # The example: real command lines of this verb that parse.
        examples = re.search(r"^examples?:\n((?:  .+\n)+)", text, re.MULTILINE)
        assert examples and 1 <= len(entry.examples) <= 2, name
        for line in examples.group(1).splitlines():
            words = shlex.split(line.replace("$MAINPID", "4242"))
            assert words[:len(name.split()) + 1] == ["batchd", *name.split()], line
            assert build_parser().parse_args(words[1:]).handler is entry.handler, line
        # The exit codes: the verb's own, each one docs/architecture.md documents, 0 and 78 always.
        codes = [int(code) for code in re.findall(r"^  (\d+) +\S", text.split(EXIT_CODES_TITLE)[1], re.MULTILINE)]
        assert codes == [code for code, _ in entry.exit_lines()], name
        assert set(codes) <= documented and {0, 78} <= set(codes), name


@pytest.mark.parametrize("name, codes", [("status", [0, 69, 78]), ("check", [0, 1, 69, 78]), ("retry", [0, 1, 69, 74, 78]),
                                         ("run", [0, 1, 65, 69, 75, 78]), ("worker", [0, 69, 78]),
                                         ("quality", [0, 1, 65, 69, 78]), ("tasks add", [0, 65, 69, 78]),
                                         ("reload", [0, 69, 78]), ("init", [0, 78])])
def test_a_verb_lists_the_codes_its_code_returns(name, codes):
    assert [code for code, _ in entries()[name].exit_lines()] == codes


def test_shared_arguments_have_one_wording_and_one_place(monkeypatch):
    wordings: dict = {}
    for name, parser in verb_parsers().items():
        if name == "tasks":
            continue
        actions = [a for a in parser._actions if not isinstance(a, argparse._HelpAction) and a.help != argparse.SUPPRESS]
        labels = [a.option_strings[0] if a.option_strings else a.metavar for a in actions]
        for action, label in zip(actions, labels):
            if label in SHARED:     # the default may differ (`--batch`: the last one, the last one closed)
                text = re.sub(r"\(default: [^)]*\)", "(default: ...)", action.help)
                wordings.setdefault(label, set()).add(text.split(": ", 1)[1] if label == "SPIDER" else text)
        if "SPIDER" in labels:      # SPIDER first, then --config and --store; --json last
            assert labels.index("SPIDER") == 0, name
        if "--config" in labels:
            assert labels[labels.index("--config") + 1] == "--store", name
            assert not [label for label in labels[:labels.index("--config")] if label.startswith("--")], name
        if "--json" in labels:
            assert labels[-1] == "--json", name
    assert {label for label, texts in wordings.items() if len(texts) > 1} == set(), wordings
    assert wordings["SPIDER"] == {SPIDER_HELP.replace("(default: BATCHD_SPIDER, or SPIDER in the config file)",
                                                      "(default: ...)")}
    assert set(wordings) == set(SHARED)


def test_batchd_help_lists_the_verbs_grouped_as_the_readme_does(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    listed = [(title, tuple(re.findall(r"^  ([a-z-]+) +\S", block, re.MULTILINE)))
              for title, block in re.findall(r"^([a-z ]+):\n((?:  .*\n)+)", text, re.MULTILINE)
              if title not in ("examples", "positional arguments", "options")]
    assert listed == [(title, names) for title, names in SECTIONS]
    assert sorted(name for _, names in SECTIONS for name in names) == sorted(VERBS)
    for name, entry in VERBS.items():
        assert re.search(rf"^  {name} +{re.escape(entry.help)}$", text, re.MULTILINE), name
    assert "\n  2   usage error" in text and "\n  130 interrupted" in text
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read().split("\n## The commands\n")[1].split("\n## ")[0]
    rows = re.findall(r"^\| ([a-z ]+) \| (.+) \|$", readme, re.MULTILINE)
    assert [(title, tuple(re.findall(r"`([a-z-]+)`", verbs))) for title, verbs in rows][1:] == list(SECTIONS)


def test_tasks_take_spider_as_the_other_verbs_do():
    parse = build_parser().parse_args
    assert (parse(["tasks", "add", "https://a.example/", "https://b.example/"]).spider,
            parse(["tasks", "add", "https://a.example/", "https://b.example/"]).urls) == \
        (None, ["https://a.example/", "https://b.example/"])
    named = parse(["tasks", "add", "crawl.py:Crawl", "https://a.example/"])
    assert (named.spider, named.urls) == ("crawl.py:Crawl", ["https://a.example/"])
    old = parse(["tasks", "add", "https://a.example/", "https://b.example/", "--spider", "mod:Crawl"])
    assert (old.spider, old.urls) == ("mod:Crawl", ["https://a.example/", "https://b.example/"])
    assert parse(["tasks", "add", "localhost:8080/x", "https://a.example/"]).urls[0] == "localhost:8080/x"
    assert parse(["tasks", "import", "crawl.py:Crawl", "tasks.csv"]).spider == "crawl.py:Crawl"
    assert parse(["tasks", "import", "tasks.csv", "--spider", "mod:Crawl"]).spider == "mod:Crawl"
    for action in ("add", "import"):
        assert "--spider" not in verb_parsers()[f"tasks {action}"].format_help()


def test_tasks_add_and_import_with_spider_and_with_the_old_option(tmp_path):
    store = f"sqlite:///{tmp_path}/crawl.db"
    added = batchd("tasks", "add", SEED, "http://x.invalid/1", "http://x.invalid/2", "--store", store)
    assert added.returncode == 0 and "2 tasks added" in added.stderr, added.stderr
    old = batchd("tasks", "add", "http://x.invalid/3", "--spider", SEED, "--store", store)
    assert old.returncode == 0 and "1 task added" in old.stderr, old.stderr
    path = tmp_path / "tasks.csv"
    path.write_text("url\nhttp://x.invalid/4\n")
    imported = batchd("tasks", "import", SEED, str(path), "--store", store)
    assert imported.returncode == 0 and "1 task added" in imported.stderr, imported.stderr
    twice = batchd("tasks", "add", SEED, "http://x.invalid/5", "--spider", SEED, "--store", store)
    assert twice.returncode == 2 and "the spider is named twice" in twice.stderr


@pytest.mark.parametrize("argv", [["no-such-verb"], [], ["status", "--history", "0"], ["failed", "--limit", "x"],
                                  ["tasks", "add"], ["tasks"], ["run", "--workers", "-1"], ["reload"],
                                  ["reload", "--pid", "0"], ["run", "--instance", "a/b"], ["status", "--watch", "x"],
                                  ["retry"], ["requeue"], ["tasks", "import"], ["web", "--listen"]])
def test_a_usage_error_is_one_line_after_the_usage_and_exit_2(argv):
    result = subprocess.run([sys.executable, "-m", "batchd", *argv], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("usage: batchd") and re.fullmatch(r"batchd[a-z -]*: error: .+",
                                                                      result.stderr.splitlines()[-1]), result.stderr
