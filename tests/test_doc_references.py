"""What the pages (README.md, docs/*.md) name of the code is there. Each check reads every page and
names every culprit at once, as `page:line: what is wrong`.

Paths.
- A `batchd/...` path anywhere on a page (prose, inline code, any block) exists in the repository.
- A path of folders and a file (`hosts/claims.py`, `bench/hosts.py`) or of folders ending in `/`
  (`download/middlewares/`), in the prose or in a block with no language (a drawing, a sample of
  output), exists under batchd/ or under the repository's root. In a block of code (sh, python, toml)
  such a path is the user's own (`myproject/spider.py`) unless it starts at a top-level folder of the
  repository (bench/, tests/, ...).
- A lone module or folder name (`pipeline.py`, `sqlite/`) in the prose or a drawing is the name of a
  file or folder somewhere in the repository: the sentence around it says which folder.
- Not paths of the repository: a path followed by `:Name` (a spider: `path/file.py:Class`), a path
  inside a URL or an absolute path (`/etc/batchd/spiders/`), and `tasks/s` or `item/stored` (no
  file at the end, no `/` at the end).

Dotted names. Every `batchd.x.y` or `batchd.x.y.Name` anywhere on a page imports: its longest module
prefix imports and the rest are attributes; `from batchd.x import A, B` names attributes A and B of
batchd.x. A path that loads only because batchd/download/chain.py keeps old paths working
(MOVED_LINKS, MOVED_MODULES) is reported with the path to write instead. `batchd.toml` is a file.

Settings. A name that stands where a setting does is declared in batchd/config.py (`Settings`):
- in inline code, every CAPS name with an underscore, and a span that is one CAPS word (`WORKERS`,
  `WORKERS = 4`);
- every top-level key of a TOML block, in any case (the file's keys are read in upper case), a table
  only if its setting is a table; the keys of a `[hosts."..."]` table are a host's terms (HOST_TERMS);
- every `BATCHD_X` anywhere on a page: X is a setting (the environment's name for it).
The CAPS names that are no settings: the task's states and moves (task.py), the log levels
(LOG_LEVELS), and NOT_SETTINGS below, each with its reason; one of those that batchd reads must still
be in its code.

Middleware lists. A DOWNLOADER_MIDDLEWARES list in any block (a TOML or Python assignment, a dict's key,
a JSON value in the environment) names every link of the default chain (config.py's default), or says
in a comment of the same block, where a reader who copies the block copies it too, which links it
leaves out and why:
    # leaves out RobotsTxtMiddleware, FetchLatencyMiddleware: this site is ours, and no Prometheus
"""
import dataclasses
import functools
import importlib
import os
import re

from batchd.config import HOST_TERMS, LOG_LEVELS, SETTING_FIELDS, SETTING_TYPES
from batchd.download.chain import MOVED_LINKS, MOVED_MODULES
from batchd.task import Move, TaskState
from pages import PAGES, ROOT, blocks, inline_code, matches, prose, read

# -- where a check looks ----------------------------------------------------------------------------

DRAWING = ""          # the language of a block that is no code: a drawing, a sample of output


def loose_text(text: str) -> list:
    """(first line, text) of what a page says in its own words: its prose and its drawings."""
    return [(1, prose(text))] + [(b.line, b.body) for b in blocks(text) if b.lang == DRAWING]


def code_blocks(text: str) -> list:
    return [(b.line, b.body) for b in blocks(text) if b.lang != DRAWING]


def everywhere(text: str) -> list:
    return loose_text(text) + code_blocks(text)


def report(problems: list) -> str:
    return f"{len(problems)} culprits:\n" + "\n".join(problems)


# -- paths ------------------------------------------------------------------------------------------

NOT_A_REPOSITORY_DIR = re.compile(r"^\.|^__pycache__$|\.egg-info$")
# Not after a character that would make the token part of something longer: a URL, an absolute path,
# a file name with a dot, $VARIABLE/..., ~/...
PATH_START = r"(?<![\w./:@~$%-])"
PATH_END = r"(?![\w/@<-])"        # nor before a word, or a <placeholder> (`retry/reason_count/<reason>`)
# Lower case, as batchd's modules are: `batchd/VERSION` is a User-Agent.
BATCHD_PATH = re.compile(PATH_START + r"batchd/(?:[a-z0-9_][\w.@-]*/?)*")
RELATIVE_PATH = re.compile(PATH_START + r"((?:[a-z_][a-z0-9_-]*/)+)([A-Za-z0-9_][\w-]*(?:\.[\w-]+)*\.[a-z]+)?" + PATH_END)
LONE_MODULE = re.compile(PATH_START + r"[a-z_][a-z0-9_]*\.py" + PATH_END)
SPIDER_AFTER = re.compile(r":[A-Za-z_]")


@functools.cache
def top_folders() -> set:
    return {d for d in os.listdir(ROOT) if os.path.isdir(os.path.join(ROOT, d)) and not NOT_A_REPOSITORY_DIR.search(d)}


@functools.cache
def package_names() -> set:
    """The name of every file and folder under batchd/."""
    names = set()
    for _, dirs, files in os.walk(os.path.join(ROOT, "batchd")):
        dirs[:] = [d for d in dirs if not NOT_A_REPOSITORY_DIR.search(d)]
        names |= set(dirs) | set(files)
    return names


def exists(path: str) -> bool:
    return os.path.exists(os.path.join(ROOT, path))


def batchd_path_problems(page: str, text: str) -> list:
    return [f"{page}:{line}: {path}: no such file or folder"
            for first, body in everywhere(text) for line, m in matches(BATCHD_PATH, body, first)
            if not exists(path := m.group(0).rstrip("."))]


def names_a_spider(m: re.Match) -> bool:
    return SPIDER_AFTER.match(m.string, m.end()) is not None


def relative_path_problem(path: str):
    """Why a role-relative path is wrong, or None: a lone folder may stand anywhere in the package (or
    at the top), a longer path under batchd/ or the root."""
    if path.count("/") == 1 and path.endswith("/"):
        return None if path[:-1] in package_names() | top_folders() else "no folder of that name in batchd/"
    return None if exists(path) or exists(os.path.join("batchd", path)) else "not under batchd/ nor the root"


def relative_path_problems(page: str, text: str) -> list:
    """Paths in the page's own words, and in its code the ones that start at a top-level folder."""
    found = [(line, m) for first, body in loose_text(text) for line, m in matches(RELATIVE_PATH, body, first)]
    found += [(line, m) for first, body in code_blocks(text) for line, m in matches(RELATIVE_PATH, body, first)
              if m.group(1).split("/")[0] in top_folders()]
    problems = []
    for line, m in found:
        if m.group(1) == "batchd/" or names_a_spider(m):
            continue                                   # batchd/... has its own check
        if why := relative_path_problem(m.group(0)):
            problems.append(f"{page}:{line}: {m.group(0)}: {why}")
    return problems


def lone_module_problems(page: str, text: str) -> list:
    return [f"{page}:{line}: {m.group(0)}: no module of that name in batchd/"
            for first, body in loose_text(text) for line, m in matches(LONE_MODULE, body, first)
            if not names_a_spider(m) and m.group(0) not in package_names()]


def path_problems(page: str, text: str) -> list:
    return batchd_path_problems(page, text) + relative_path_problems(page, text) + lone_module_problems(page, text)


def test_every_path_a_page_names_exists():
    problems = [p for page in PAGES for p in path_problems(page, read(page))]
    assert not problems, report(problems)


# -- dotted names -----------------------------------------------------------------------------------

DOTTED_NAME = re.compile(r"(?<![\w./-])batchd(?:\.[A-Za-z_]\w*)+")
FROM_IMPORT = re.compile(r"\bfrom\s+(batchd(?:\.\w+)*)\s+import\s+(\w+(?:\s*,\s*\w+)*)")
FILE_SUFFIXES = ("toml", "json", "jsonl", "db", "service", "md")     # batchd.toml is a file, not a name


def resolve(name: str):
    """Why `name` does not import, or None: each part is an attribute of what comes before it, or a
    module of the package before it."""
    found, parts = importlib.import_module("batchd"), name.split(".")
    for i, part in enumerate(parts[1:], start=1):
        if hasattr(found, part):
            found = getattr(found, part)
            continue
        here = ".".join(parts[:i])
        if not hasattr(found, "__path__"):
            return f"{here} has no {part}"
        try:
            found = importlib.import_module(f"{here}.{part}")
        except ModuleNotFoundError as e:
            if e.name != f"{here}.{part}":
                raise                   # the module is there, and what it imports is not: not a doc's fault
            return f"no module or name {part} in {here}"
    return None


def moved_to(name: str):
    """The path to write for an old path of one of batchd's links (download/chain.py), or None."""
    module, _, cls = name.rpartition(".")
    new_module = MOVED_LINKS.get(name) or MOVED_MODULES.get(module)
    return f"{new_module}.{cls}" if new_module else None


def page_dotted_names(text: str) -> list:
    """(line, name) of every batchd.x... a page names, and of every batchd.x.A in `from batchd.x import A`."""
    names = []
    for first, body in everywhere(text):
        names += [(line, m.group(0)) for line, m in matches(DOTTED_NAME, body, first)
                  if m.group(0).rpartition(".")[2] not in FILE_SUFFIXES]
        names += [(line, f"{m.group(1)}.{what.strip()}") for line, m in matches(FROM_IMPORT, body, first)
                  for what in m.group(2).split(",")]
    return names


def dotted_name_problems(page: str, text: str) -> list:
    problems = []
    for line, name in page_dotted_names(text):
        if new := moved_to(name):
            problems.append(f"{page}:{line}: {name}: an old path (download/chain.py loads it with a warning); "
                            f"write {new}")
        elif why := resolve(name):
            problems.append(f"{page}:{line}: {name}: {why}")
    return problems


def test_every_dotted_batchd_name_a_page_names_imports():
    problems = [p for page in PAGES for p in dotted_name_problems(page, read(page))]
    assert not problems, report(problems)


# -- settings ---------------------------------------------------------------------------------------

SETTINGS = set(SETTING_FIELDS)
# CAPS names that stand where a setting could and are none, and why a page names them. One that
# batchd reads (all but the first three) must still be in its code.
FOREIGN_WORDS = {"UNIQUE": "SQL: an item table's unique index", "JSON": "SQL: the record's stats column type",
                 "TIME": "Redis: the command a lease's deadline is read with"}
NOT_SETTINGS = {
    **FOREIGN_WORDS,
    "BATCHD_CONFIG": "the environment's path of the config file (config.ENV_CONFIG), read before any setting",
    "BATCHD_ROLE": "a journal field batchd writes (service/systemd.py)",
    "BATCHD_BATCH": "a journal field batchd writes (service/systemd.py)",
    "BATCHD_TASK_ID": "a journal field batchd writes (service/systemd.py)",
    "STATE_DIRECTORY": "systemd's: where FAILED_ITEMS_PATH goes by default",
    "NOTIFY_SOCKET": "systemd's: a child drops it, so that only the supervisor notifies",
    "PR_SET_PDEATHSIG": "Linux's: how a child dies with its supervisor",
    "SLOTS_PER_THREAD": "a constant of the ledger's size (worker/worker.py)",
    "MOST_PER_CLAIM": "a constant: the most tasks one claim takes (hosts/claims.py)",
    "TEST_MYSQL_URL": "the tests' own MariaDB (tests/conftest.py)",
    "TEST_REDIS_URL": "the tests' own Redis (tests/conftest.py)",
    "TEST_WORKERS": "how many test modules run at once (tests/run-suites)",
}
ENUM_NAMES = {member.name for enum in (TaskState, Move) for member in enum} | set(LOG_LEVELS)
# A name with an underscore wherever it stands in a span, or a whole span that is one CAPS word (with
# `= value` after it, as a page shows a setting being set).
CAPS_NAME = re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b")
CAPS_SPAN = re.compile(r"([A-Z][A-Z0-9]*)(?:\s*=.*)?")
ENVIRONMENT_NAME = re.compile(r"\bBATCHD_[A-Z0-9_]*[A-Z0-9]\b")
TOML_TABLE = re.compile(r"^\s*\[+\s*([^\]]+?)\s*\]+\s*(?:#.*)?$")
TOML_KEY = re.compile(r"^\s*([A-Za-z_][\w-]*)\s*=")
HOSTS_TABLE = re.compile(r"hosts\.")


@functools.cache
def code() -> str:
    """batchd's source, the tests' conftest and the test command: where NOT_SETTINGS are read."""
    files = [os.path.join(folder, f) for folder, _, names in os.walk(os.path.join(ROOT, "batchd"))
             for f in names if f.endswith(".py")]
    files += [os.path.join(ROOT, "tests", "conftest.py"), os.path.join(ROOT, "tests", "run-suites")]
    return "\n".join(open(f, encoding="utf-8").read() for f in files)


def in_the_code(name: str) -> bool:
    return re.search(rf"\b{name}\b", code()) is not None


def caps_names(text: str) -> list:
    """(line, name) of the CAPS names in inline code and of every BATCHD_X anywhere."""
    found = []
    for line, span in inline_code(text):
        found += [(line, name) for name in CAPS_NAME.findall(span)]
        if whole := CAPS_SPAN.fullmatch(span):
            found.append((line, whole.group(1)))
    found += [(line, m.group(0)) for first, body in everywhere(text) for line, m in matches(ENVIRONMENT_NAME, body, first)]
    return found


def caps_name_problem(name: str):
    if name in SETTINGS or name in ENUM_NAMES or name.removeprefix("BATCHD_") in SETTINGS:
        return None
    if name not in NOT_SETTINGS:
        return "no setting (config.py), nor a name this test knows is none (NOT_SETTINGS)"
    if name not in FOREIGN_WORDS and not in_the_code(name):
        return "in NOT_SETTINGS, and batchd's code no longer has it"
    return None


def toml_key_problems(page: str, line: int, body: str) -> list:
    """The keys of a TOML block as batchd reads the file: top-level keys are settings in any case, a
    table is a table setting, a host's table holds host terms."""
    problems, table = [], None
    for n, text in enumerate(body.splitlines(), start=line):
        if header := TOML_TABLE.match(text):
            table = header.group(1)
            if SETTING_TYPES.get(table.split(".")[0].upper(), (None,))[0] is not dict:
                problems.append(f"{page}:{n}: [{table}]: no table setting")
            continue
        key = TOML_KEY.match(text)
        if key is None:
            continue
        if table is None and key.group(1).upper() not in SETTINGS:
            problems.append(f"{page}:{n}: TOML key {key.group(1)}: no setting")
        elif table is not None and HOSTS_TABLE.match(table) and key.group(1) not in HOST_TERMS:
            problems.append(f"{page}:{n}: {key.group(1)} in [{table}]: no host term ({', '.join(HOST_TERMS)})")
    return problems


def setting_problems(page: str, text: str) -> list:
    problems = [f"{page}:{line}: {name}: {why}" for line, name in caps_names(text)
                if (why := caps_name_problem(name))]
    return problems + [p for b in blocks(text) if b.lang == "toml" for p in toml_key_problems(page, b.line, b.body)]


def test_every_setting_a_page_names_is_declared():
    problems = [p for page in PAGES for p in setting_problems(page, read(page))]
    assert not problems, report(problems)


# -- middleware lists -------------------------------------------------------------------------------

DEFAULT_CHAIN = SETTING_FIELDS["DOWNLOADER_MIDDLEWARES"].default
MIDDLEWARE_LIST = re.compile(r"""DOWNLOADER_MIDDLEWARES["']?\s*[:=]\s*['"]?\[""")
QUOTED = re.compile(r"""["']([^"']+)["']""")
LEAVES_OUT = re.compile(r"#\s*leaves out\s+(.+?):\s*\S")


def list_items(body: str, start: int) -> list:
    """The quoted entries of the list that opens at `start`, up to its closing bracket (comments,
    which may hold brackets, skipped)."""
    items = []
    for text in body[start:].splitlines():
        code_part = text.split("#", 1)[0]
        items += QUOTED.findall(code_part)
        if "]" in code_part:
            break
    return items


def said_left_out(body: str) -> set:
    """The class names a block's `# leaves out A, B: why` comments name."""
    return {name.strip().rpartition(".")[2] for m in LEAVES_OUT.finditer(body)
            for name in re.split(r",|\band\b", m.group(1)) if name.strip()}


def middleware_list_problems(page: str, text: str) -> list:
    problems = []
    for b in blocks(text):
        for line, m in matches(MIDDLEWARE_LIST, b.body, b.line):
            listed = {path.rpartition(".")[2] for path in list_items(b.body, m.end())}
            default = {path.rpartition(".")[2] for path in DEFAULT_CHAIN}
            said = said_left_out(b.body)
            if silent := sorted(default - listed - said):
                problems.append(f"{page}:{line}: DOWNLOADER_MIDDLEWARES leaves out {', '.join(silent)} without "
                                "a `# leaves out NAME: why` comment in its block")
            if wrong := sorted(said - (default - listed)):
                problems.append(f"{page}:{line}: `# leaves out` names {', '.join(wrong)}: no default link the "
                                "list leaves out")
    return problems


def test_every_middleware_list_keeps_the_default_chain_or_says_what_it_leaves_out():
    problems = [p for page in PAGES for p in middleware_list_problems(page, read(page))]
    assert not problems, report(problems)


def test_the_pages_show_a_middleware_list():
    """A check that finds no list passes for nothing: writing-spiders.md shows one."""
    assert MIDDLEWARE_LIST.search(read("docs/writing-spiders.md"))
