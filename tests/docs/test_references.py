"""What the pages (README.md, docs/*.md) name of the code is there. Each check reads every page and
reports every culprit at once, as `page:line: what is wrong`.

Paths.
- A `batchd/...` path anywhere on a page (prose, inline code, any block) exists in the repository.
- A path of folders and a file (`hosts/claims.py`, `bench/hosts.py`) or of folders ending in `/`
  (`download/middlewares/`), in the prose or in a block with no language (a drawing, a sample of
  output), exists under batchd/ or under the repository's root. In a block of code (sh, python, toml)
  such a path is the user's own (`myproject/spider.py`) unless it starts at a top-level folder of the
  repository (bench/, tests/, ...).
- A module or a folder named alone (`pipeline.py`, `sqlite/`) in the prose or a drawing is one of the
  package's, and in a table row that gives a folder first (`| `worker/` | ... |`), one in that folder.
- Not paths of the repository: a path followed by `:Name` (a spider: `path/file.py:Class`), a path
  inside a URL or an absolute one (`/etc/batchd/spiders/`), and `tasks/s` or `item/stored` (no file
  and no `/` at the end).

The floors. docs/architecture.md's drawing of floors (the block of lines `N  room/  room.py  words`)
puts every room on the floor tests/test_layout.py's FLOORS gives it, and no other room.

Dotted names. Every `batchd.x.y` or `batchd.x.y.Name` anywhere on a page imports: its longest module
prefix imports and the rest are attributes; `from batchd.x import A, B` names attributes A and B of
batchd.x. A path that loads only because batchd/download/chain.py keeps old paths working
(MOVED_LINKS, MOVED_MODULES) is reported with the path to write instead. `batchd.toml` is a file.

Settings. A name that stands where a setting does is declared in batchd/config.py (`Settings`):
- in inline code, every CAPS name with an underscore, and a span that is one CAPS word (`WORKERS`,
  `WORKERS = 4`);
- every top-level key of a TOML block, in any case (a config file's keys are read in upper case), a
  table only where its setting is a table, and in a `[hosts."..."]` table a host's terms (HOST_TERMS);
- every `BATCHD_X` anywhere on a page: X is a setting (the environment's name for it).
The CAPS names that are no settings: the task's states and moves (task.py), the log levels
(LOG_LEVELS), and NOT_SETTINGS below, each with its reason. That list cannot rot: each of its names is
on a page, and each that batchd reads is still in its code.

Middleware lists. A DOWNLOADER_MIDDLEWARES list in any block (a TOML or Python assignment, a dict's key,
a JSON value in the environment) names every link of the default chain (config.py's default), or says
in a comment of the same block (a reader who copies the block copies it too) which links it leaves out
and why:
    # leaves out RobotsTxtMiddleware, FetchLatencyMiddleware: our own site, and no Prometheus
"""
import functools
import importlib
import os
import re

from batchd.config import HOST_TERMS, LOG_LEVELS, SETTING_FIELDS, SETTING_TYPES, Settings
from batchd.download.chain import MOVED_LINKS, MOVED_MODULES
from batchd.task import Move, TaskState
from pages import PAGES, ROOT, blocks, inline_code, matches, prose, read
from test_layout import FLOORS

DRAWING = ""          # the language of a block that is no code: a drawing, a sample of output


def loose_text(text: str) -> list:
    """(first line, text) of what a page says in its own words: its prose and its drawings."""
    return [(1, prose(text))] + [(b.line, b.body) for b in blocks(text) if b.lang == DRAWING]


def code_blocks(text: str) -> list:
    return [(b.line, b.body) for b in blocks(text) if b.lang != DRAWING]


def everywhere(text: str) -> list:
    return loose_text(text) + code_blocks(text)


def page_and_line(problem: str) -> tuple:
    page, line, _ = (problem.split(":", 2) + ["", ""])[:3]
    return page, int(line) if line.isdigit() else 0


def report(problems: list) -> str:
    """Every culprit, one a line, in the order of the pages."""
    return f"{len(problems)} culprits:\n" + "\n".join(sorted(problems, key=page_and_line))


# -- paths ------------------------------------------------------------------------------------------

NOT_A_REPOSITORY_DIR = re.compile(r"^\.|^__pycache__$|\.egg-info$")
# Not after a character that makes the token part of something longer (a URL, an absolute path, a
# dotted name, $VARIABLE/..., ~/...), nor before a word or a <placeholder> (`retry/reason_count/<reason>`).
PATH_START = r"(?<![\w./:@~$%-])"
PATH_END = r"(?![\w/@<-])"
# Lower case, as batchd's modules are: `batchd/VERSION` is a User-Agent.
BATCHD_PATH = re.compile(PATH_START + r"batchd/(?:[a-z0-9_][\w.@-]*/?)*")
RELATIVE_PATH = re.compile(PATH_START + r"((?:[a-z_][a-z0-9_-]*/)+)([A-Za-z0-9_][\w-]*(?:\.[\w-]+)*\.[a-z]+)?"
                           + PATH_END)
LONE_MODULE = re.compile(PATH_START + r"[a-z_][a-z0-9_]*\.py" + PATH_END)
LONE_FOLDER = re.compile(PATH_START + r"[a-z_][a-z0-9_]*/" + PATH_END)
SPIDER_AFTER = re.compile(r":[A-Za-z_]")
# A table row that gives a folder of the package in its first cell (| `worker/` | ... |).
FOLDER_ROW = re.compile(r"^\|\s*`([a-z_]+/(?:[a-z_]+/)*)`[^|]*\|(.*)$", re.M)


@functools.cache
def top_folders() -> frozenset:
    return frozenset(d for d in os.listdir(ROOT)
                     if os.path.isdir(os.path.join(ROOT, d)) and not NOT_A_REPOSITORY_DIR.search(d))


@functools.cache
def names_under(folder: str) -> frozenset:
    """The name of every file and folder under `folder` (of the repository)."""
    names: set = set()
    for _, dirs, files in os.walk(os.path.join(ROOT, folder)):
        dirs[:] = [d for d in dirs if not NOT_A_REPOSITORY_DIR.search(d)]
        names |= set(dirs) | set(files)
    return frozenset(names)


def exists(path: str) -> bool:
    return os.path.exists(os.path.join(ROOT, path))


def names_a_spider(m: re.Match) -> bool:
    return SPIDER_AFTER.match(m.string, m.end()) is not None


def batchd_path_problems(page: str, text: str) -> list:
    return [f"{page}:{line}: {path}: no such file or folder"
            for first, body in everywhere(text) for line, m in matches(BATCHD_PATH, body, first)
            if not exists(path := m.group(0).rstrip("."))]


def relative_path_problem(path: str):
    """Why a role-relative path is wrong, or None: a folder named alone may stand anywhere in the package
    (or at the top), a longer path under batchd/ or the root."""
    if LONE_FOLDER.fullmatch(path):
        return None if path[:-1] in names_under("batchd") | top_folders() else "no folder of that name in batchd/"
    return None if exists(path) or exists(os.path.join("batchd", path)) else "not under batchd/ nor the root"


def relative_path_problems(page: str, text: str) -> list:
    """Paths in the page's own words, and in its code the ones that start at a top-level folder."""
    found = [(line, m) for first, body in loose_text(text) for line, m in matches(RELATIVE_PATH, body, first)]
    found += [(line, m) for first, body in code_blocks(text) for line, m in matches(RELATIVE_PATH, body, first)
              if m.group(1).split("/")[0] in top_folders()]
    return [f"{page}:{line}: {m.group(0)}: {why}" for line, m in found
            if not m.group(1).startswith("batchd/") and not names_a_spider(m)      # batchd/: its own check
            and (why := relative_path_problem(m.group(0)))]


def lone_module_problems(page: str, text: str) -> list:
    """A module named alone is one of the package's."""
    return [f"{page}:{line}: {m.group(0)}: no module of that name in batchd/"
            for first, body in loose_text(text) for line, m in matches(LONE_MODULE, body, first)
            if not names_a_spider(m) and m.group(0) not in names_under("batchd")]


def folder_row_problems(page: str, text: str) -> list:
    """In a row of a folder (the package's table), a module or folder named alone is in that folder."""
    problems = []
    for line, row in matches(FOLDER_ROW, prose(text)):
        folder = row.group(1) if row.group(1) == "batchd/" else os.path.join("batchd", row.group(1))
        problems += [f"{page}:{line}: {m.group(0)}: not in {folder}"
                     for pattern in (LONE_MODULE, LONE_FOLDER) for m in pattern.finditer(row.group(2))
                     if m.group(0).rstrip("/") not in names_under(folder)]
    return problems


def path_problems(page: str, text: str) -> list:
    return (batchd_path_problems(page, text) + relative_path_problems(page, text)
            + lone_module_problems(page, text) + folder_row_problems(page, text))


def test_every_path_a_page_names_exists():
    problems = [p for page in PAGES for p in path_problems(page, read(page))]
    assert not problems, report(problems)


# -- the floors -------------------------------------------------------------------------------------

FLOORS_PAGE = "docs/architecture.md"
FLOOR_LINE = re.compile(r"^(\d+) +(.*)$")
ROOM = re.compile(r"([a-z_]+)(?:/|\.py)")      # a folder (`worker/`) or a loose module (`runtime.py`)


def drawn_floors(text: str) -> dict:
    """room -> floor as the page's drawing of floors shows them: the block with no language whose every
    line is a floor's number and then its rooms (`4  master/  worker/  the roles`); the rooms are the
    words up to the first that is no folder and no module."""
    for b in blocks(text):
        floors = [FLOOR_LINE.match(line) for line in b.body.splitlines() if line.strip()]
        if b.lang == DRAWING and floors and all(floors):
            return {room: int(m.group(1)) for m in floors if m for room in rooms_of(m.group(2))}
    return {}


def rooms_of(words: str) -> list:
    rooms = []
    for word in words.split():
        if not (room := ROOM.fullmatch(word)):
            break
        rooms.append(room.group(1))
    return rooms


def floor_problems(drawn: dict, floors: dict) -> list:
    if not drawn:
        return [f"{FLOORS_PAGE}: no drawing of the floors (a block of lines `N  room/  room.py  ...`)"]
    where = f"{FLOORS_PAGE}'s drawing"
    problems = [f"{where}: {room} is missing (floor {floors[room]} in tests/test_layout.py)"
                for room in sorted(floors.keys() - drawn.keys())]
    problems += [f"{where}: {room} (floor {drawn[room]}) is no room of tests/test_layout.py"
                 for room in sorted(drawn.keys() - floors.keys())]
    return problems + [f"{where}: {room} on floor {drawn[room]}, on {floors[room]} in tests/test_layout.py"
                       for room in sorted(drawn.keys() & floors.keys()) if drawn[room] != floors[room]]


def test_the_drawing_of_floors_is_the_layout_tests():
    problems = floor_problems(drawn_floors(read(FLOORS_PAGE)), FLOORS)
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
        here = ".".join(parts[:i])
        if hasattr(found, part):
            found = getattr(found, part)
        elif not hasattr(found, "__path__"):
            return f"{here} has no {part}"
        else:
            try:
                found = importlib.import_module(f"{here}.{part}")
            except ModuleNotFoundError as e:
                if e.name != f"{here}.{part}":
                    raise                # the module is there and what it imports is not: no doc's fault
                return f"no module or name {part} in {here}"
    return None


def moved_to(name: str):
    """The path to write for an old path of one of batchd's links (download/chain.py), or None."""
    module, _, cls = name.rpartition(".")
    new_module = MOVED_LINKS.get(name) or MOVED_MODULES.get(module)
    return f"{new_module}.{cls}" if new_module else None


def page_dotted_names(text: str) -> list:
    """(line, name) of every batchd.x... a page names, and of batchd.x.A for `from batchd.x import A`."""
    names = []
    for first, body in everywhere(text):
        names += [(line, m.group(0)) for line, m in matches(DOTTED_NAME, body, first)
                  if m.group(0).rpartition(".")[2] not in FILE_SUFFIXES]
        names += [(line, f"{m.group(1)}.{what.strip()}") for line, m in matches(FROM_IMPORT, body, first)
                  for what in m.group(2).split(",")]
    return names


def dotted_name_problem(name: str):
    if new := moved_to(name):
        return f"an old path (download/chain.py loads it with a warning): write {new}"
    return resolve(name)


def dotted_name_problems(page: str, text: str) -> list:
    return [f"{page}:{line}: {name}: {why}" for line, name in page_dotted_names(text)
            if (why := dotted_name_problem(name))]


def test_every_dotted_batchd_name_a_page_names_imports():
    problems = [p for page in PAGES for p in dotted_name_problems(page, read(page))]
    assert not problems, report(problems)


# -- settings ---------------------------------------------------------------------------------------

SETTINGS = set(SETTING_FIELDS)
# CAPS names that pages show where a setting could stand and that are none, and why a page names them.
FOREIGN_WORDS = {"UNIQUE": "SQL: an item table's unique index", "JSON": "SQL: the record's stats column type",
                 "TIME": "Redis: the command a lease's deadline is read with"}
NAMES_BATCHD_READS = {
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
NOT_SETTINGS = {**FOREIGN_WORDS, **NAMES_BATCHD_READS}
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
    """batchd's source, the tests' conftest and the test command: where NAMES_BATCHD_READS are read."""
    files = [os.path.join(folder, f) for folder, _, names in os.walk(os.path.join(ROOT, "batchd"))
             for f in names if f.endswith(".py")]
    files += [os.path.join(ROOT, "tests", "conftest.py"), os.path.join(ROOT, "tests", "run-suites")]
    return "\n".join(open(f, encoding="utf-8").read() for f in files)


def caps_names(text: str) -> list:
    """(line, name) of the CAPS names in inline code and of every BATCHD_X anywhere, each once a line."""
    found = set()
    for line, span in inline_code(text):
        found |= {(line, name) for name in CAPS_NAME.findall(span)}
        if whole := CAPS_SPAN.fullmatch(span):
            found.add((line, whole.group(1)))
    found |= {(line, m.group(0)) for first, body in everywhere(text)
              for line, m in matches(ENVIRONMENT_NAME, body, first)}
    return sorted(found)


def caps_name_problem(name: str):
    if name in SETTINGS or name.removeprefix("BATCHD_") in SETTINGS or name in ENUM_NAMES or name in NOT_SETTINGS:
        return None
    return "no setting (config.py), nor a name this test knows is none (NOT_SETTINGS)"


def toml_key_problems(page: str, line: int, body: str) -> list:
    """The keys of a TOML block as batchd reads the file: top-level keys are settings in any case, a
    table is a table setting, a host's table holds host terms."""
    problems, table = [], None
    for n, text in enumerate(body.splitlines(), start=line):
        if header := TOML_TABLE.match(text):
            table = header.group(1)
            if SETTING_TYPES.get(table.split(".")[0].upper(), (None,))[0] is not dict:
                problems.append(f"{page}:{n}: [{table}]: no table setting")
        elif not (key := TOML_KEY.match(text)):
            continue
        elif table is None and key.group(1).upper() not in SETTINGS:
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


def test_every_name_that_is_no_setting_is_on_a_page_and_in_the_code():
    """NOT_SETTINGS cannot rot: a name no page shows any more goes, and so does one batchd no longer reads."""
    shown = {name for page in PAGES for _, name in caps_names(read(page))}
    problems = [f"{name}: on no page" for name in sorted(NOT_SETTINGS.keys() - shown)]
    problems += [f"{name}: not in batchd's code (nor tests/conftest.py, tests/run-suites)"
                 for name in sorted(NAMES_BATCHD_READS) if not re.search(rf"\b{name}\b", code())]
    assert not problems, report(problems)


# -- middleware lists -------------------------------------------------------------------------------

DEFAULT_CHAIN = Settings().DOWNLOADER_MIDDLEWARES
LINK_BY_CLASS = {path.rpartition(".")[2]: path for path in DEFAULT_CHAIN}
MIDDLEWARE_LIST = re.compile(r"""DOWNLOADER_MIDDLEWARES["']?\s*[:=]\s*['"]?\[""")
QUOTED = re.compile(r"""["']([^"']+)["']""")
LEAVES_OUT = re.compile(r"#\s*leaves out\s+(.+?):\s*\S")


def list_items(body: str, start: int) -> list:
    """The quoted entries of the list that opens at `start`, up to its closing bracket (comments, which
    may hold brackets, skipped). An old path of one of batchd's links counts as its new one (the dotted
    name check reports it)."""
    items = []
    for text in body[start:].splitlines():
        code_part = text.split("#", 1)[0]
        items += [moved_to(path) or path for path in QUOTED.findall(code_part)]
        if "]" in code_part:
            break
    return items


def said_left_out(body: str) -> set:
    """The links a block's `# leaves out A, B: why` comments name, by class name or dotted path."""
    return {name.strip().rpartition(".")[2] for m in LEAVES_OUT.finditer(body)
            for name in re.split(r",|\band\b", m.group(1)) if name.strip()}


def middleware_list_problems(page: str, text: str) -> list:
    problems = []
    for b in blocks(text):
        said = said_left_out(b.body)
        for line, m in matches(MIDDLEWARE_LIST, b.body, b.line):
            left_out = {name for name, path in LINK_BY_CLASS.items() if path not in list_items(b.body, m.end())}
            if silent := sorted(left_out - said):
                problems.append(f"{page}:{line}: DOWNLOADER_MIDDLEWARES leaves out {', '.join(silent)} without "
                                "a `# leaves out NAME: why` comment in its block")
            if wrong := sorted(said - left_out):
                problems.append(f"{page}:{line}: `# leaves out` names {', '.join(wrong)}: no link of the "
                                "default chain that this list leaves out")
    return problems


def test_every_middleware_list_keeps_the_default_chain_or_says_what_it_leaves_out():
    problems = [p for page in PAGES for p in middleware_list_problems(page, read(page))]
    assert not problems, report(problems)


def test_the_pages_show_a_middleware_list():
    """A check that finds no list passes for nothing: writing-spiders.md shows one."""
    assert MIDDLEWARE_LIST.search(read("docs/writing-spiders.md"))


# -- the checks catch what they are for -------------------------------------------------------------

def test_the_path_check_fails_on_a_path_that_moved():
    page = ("The patrol (master.py), `process/` and worker/metrics.py; batchd/worker/items.py.\n"
            "Fine: (hosts/claims.py), `download/middlewares/`, `crawl_task.py:CrawlTask`, 285 tasks/s, "
            "`item/stored`, https://example.com/a/b.py, /etc/batchd/spiders/, batchd/config.py.\n\n"
            "| folder | what |\n| --- | --- |\n| `worker/` | the lander (`pipeline.py`), the patrol (`patrol.py`) |\n\n"
            "```sh\npython bench/nothing.py myproject/spider.py   # bench/hosts.py\n```\n\n"
            "```\n3  download/  settle/\n1  process/\n```\n")
    assert sorted(path_problems("docs/page.md", page), key=page_and_line) == [
        "docs/page.md:1: batchd/worker/items.py: no such file or folder",
        "docs/page.md:1: process/: no folder of that name in batchd/",
        "docs/page.md:1: worker/metrics.py: not under batchd/ nor the root",
        "docs/page.md:1: master.py: no module of that name in batchd/",
        "docs/page.md:6: patrol.py: not in batchd/worker/",
        "docs/page.md:9: bench/nothing.py: not under batchd/ nor the root",
        "docs/page.md:14: process/: no folder of that name in batchd/"]


def test_the_floors_check_fails_on_a_room_missing_misplaced_or_gone():
    page = "```\n2  backends/  the ports\n1  process/  hosts/  recrawl/\n0  config.py\n```\n"
    assert drawn_floors(page) == {"backends": 2, "process": 1, "hosts": 1, "recrawl": 1, "config": 0}
    floors = {"backends": 2, "hosts": 2, "recrawl": 1, "config": 0, "service": 1}
    assert floor_problems(drawn_floors(page), floors) == [
        "docs/architecture.md's drawing: service is missing (floor 1 in tests/test_layout.py)",
        "docs/architecture.md's drawing: process (floor 1) is no room of tests/test_layout.py",
        "docs/architecture.md's drawing: hosts on floor 1, on 2 in tests/test_layout.py"]


def test_the_dotted_name_check_fails_on_a_name_that_does_not_import():
    page = ("`batchd.Requests`, `batchd.worker.items`, `batchd.download.chain.StatsMiddleware`, "
            "batchd.config.Settings.NOPE and batchd.toml.\n\n"
            "```python\nfrom batchd.config import Settings, Setting\nyield batchd.Request(url)\n```\n")
    assert dotted_name_problems("docs/page.md", page) == [
        "docs/page.md:1: batchd.Requests: no module or name Requests in batchd",
        "docs/page.md:1: batchd.worker.items: no module or name items in batchd.worker",
        "docs/page.md:1: batchd.download.chain.StatsMiddleware: an old path (download/chain.py loads it with a "
        "warning): write batchd.download.middlewares.stats.StatsMiddleware",
        "docs/page.md:1: batchd.config.Settings.NOPE: batchd.config.Settings has no NOPE",
        "docs/page.md:4: batchd.config.Setting: batchd.config has no Setting"]


def test_the_setting_check_fails_on_a_setting_that_is_not_declared():
    page = ("Set `DOWNLOAD_DELAYS = 1`, `WORKER`, `BATCHD_SPIDERS`, `WORKERS`, `BATCHD_CONFIG`, `FINISH_DONE`\n"
            "and `MOST_PER_CLAIMS`.\n\n"
            "```toml\nTHREADS = 4\nworkers = 2\n[hosts.\"example.com\"]\nrate = 1\nspeed = 2\n[proxies]\n```\n\n"
            "```sh\nBATCHD_WORKER=2 batchd run\n```\n")
    assert setting_problems("docs/page.md", page) == [
        "docs/page.md:1: BATCHD_SPIDERS: no setting (config.py), nor a name this test knows is none (NOT_SETTINGS)",
        "docs/page.md:1: DOWNLOAD_DELAYS: no setting (config.py), nor a name this test knows is none (NOT_SETTINGS)",
        "docs/page.md:1: WORKER: no setting (config.py), nor a name this test knows is none (NOT_SETTINGS)",
        "docs/page.md:2: MOST_PER_CLAIMS: no setting (config.py), nor a name this test knows is none (NOT_SETTINGS)",
        "docs/page.md:14: BATCHD_WORKER: no setting (config.py), nor a name this test knows is none (NOT_SETTINGS)",
        "docs/page.md:5: TOML key THREADS: no setting",
        "docs/page.md:9: speed in [hosts.\"example.com\"]: no host term (" + ", ".join(HOST_TERMS) + ")",
        "docs/page.md:10: [proxies]: no table setting"]


def test_the_middleware_check_fails_on_a_list_that_leaves_out_a_link_silently():
    whole = ",\n".join(f'  "{path}"' for path in DEFAULT_CHAIN)
    without_latency = ",\n".join(f'  "{path}"' for path in DEFAULT_CHAIN[:-1])
    page = (f"```toml\nDOWNLOADER_MIDDLEWARES = [\n{whole}, \"myproject.Mine\"]\n```\n\n"
            f"```toml\n# leaves out FetchLatencyMiddleware: no Prometheus here\nDOWNLOADER_MIDDLEWARES = [\n{without_latency}]\n```\n\n"
            f"```toml\nDOWNLOADER_MIDDLEWARES = [\n{without_latency}]   # [the latency] is not needed\n```\n\n"
            "```python\nsettings = {\"DOWNLOADER_MIDDLEWARES\": [\"batchd.download.middlewares.retry.RetryMiddleware\"]}"
            "  # leaves out RobotsTxtMiddleware, RetryMiddleware: a typo\n```\n")
    assert middleware_list_problems("docs/page.md", page) == [
        "docs/page.md:28: DOWNLOADER_MIDDLEWARES leaves out FetchLatencyMiddleware without a "
        "`# leaves out NAME: why` comment in its block",
        "docs/page.md:40: DOWNLOADER_MIDDLEWARES leaves out AutoThrottleMiddleware, FetchLatencyMiddleware, "
        "HostBreakerMiddleware, PolitenessMiddleware, ProxyMiddleware, RateLimitMiddleware, StatsMiddleware "
        "without a `# leaves out NAME: why` comment in its block",
        "docs/page.md:40: `# leaves out` names RetryMiddleware: no link of the default chain that this list "
        "leaves out"]
