"""What every verb of the `batchd` command shares: its entry in a verb group and its help, the arguments
several verbs take (SPIDER, --config, --store, --batch, --json, --workers), each worded here once, how they
resolve to settings and a Runtime, the number types.

Each verb module (serve, status_verb, check, operate, project, dashboard) holds one VerbGroup, VERBS, and adds a verb
with `@verb(name, summary, arguments, examples=..., exits=...)`: its own arguments and handler (a handler returns
the exit code). main.py gathers the groups into the parser; a verb module imports this module, never main.py.

Every verb's --help reads the same way: the one-line summary; its arguments in one order (the positionals,
SPIDER first; --config and --store; the verb's own options; --batch, --reason; --json last); an example or two;
the exit codes it can return, each from docs/architecture.md's list, in the wording of EXIT_WORDS unless the
verb's meaning is narrower.
"""
import argparse
import logging
import os
import textwrap
from dataclasses import dataclass
from typing import Callable, Optional

from ..config import (DEFAULT_CONFIG_FILE, ENV_CONFIG, INSTANCE_ROLES, LOCAL_CONFIG_FILE, found_config_file,
                      load_settings)
from ..errors import ConfigError, ExitCode
from ..backends import sqlite_path, store_url
from ..supervisor.loader import SpiderSource, absolute_spider_path, build_runtime
from ..service.systemd import setup_logging, under_systemd
from ..runtime import Runtime

log = logging.getLogger("batchd")

EMBEDDED_FILE = "batchd.db"
MAKE_STORE = "`batchd tasks add URL...` makes one (then `batchd run`)"


HELP_WIDTH = 79
EXIT_CODES_TITLE = 'exit codes (docs/architecture.md, "Exit codes"):'
# The exit codes verbs share, each worded once; a verb whose meaning is narrower says its own (exits=...).
EXIT_WORDS = {ExitCode.OK: "done",
              ExitCode.UNAVAILABLE: "MySQL or Redis unreachable",
              ExitCode.CONFIG: "configuration error (a setting, the spider, the store, the task table)"}
NO_SUCH_BATCH = (ExitCode.FAILURE, "--batch names a batch never opened")


@dataclass(frozen=True)
class Verb:
    name: str
    help: str                                                 # the one-line summary
    arguments: Callable[[argparse.ArgumentParser], object]    # what it returns is ignored
    handler: Callable[[argparse.Namespace], int]
    examples: tuple = ()        # one or two real command lines
    exits: tuple = ()           # the codes it can return: an ExitCode (worded by EXIT_WORDS), or (code, meaning)

    def exit_lines(self) -> list:
        """[(code, meaning)] in the order given."""
        return [(int(e), EXIT_WORDS[e]) if isinstance(e, ExitCode) else (int(e[0]), e[1]) for e in self.exits]

    def parser_texts(self) -> dict:
        """What add_parser takes for this verb's --help: the summary, then the examples and exit codes after
        the arguments, laid out as written."""
        examples = ["example:" if len(self.examples) == 1 else "examples:"] + [f"  {line}" for line in self.examples]
        exits = [EXIT_CODES_TITLE] + [f"  {code:<3} {meaning}" for code, meaning in self.exit_lines()]
        return dict(help=self.help, description=textwrap.fill(self.help, HELP_WIDTH),
                    epilog="\n".join(examples + [""] + exits), formatter_class=argparse.RawDescriptionHelpFormatter)


class VerbGroup:
    """The verbs of one module, in the order they are added."""

    def __init__(self) -> None:
        self.verbs: list[Verb] = []

    def __iter__(self):
        return iter(self.verbs)

    def verb(self, name: str, help: str,
             arguments: Callable[[argparse.ArgumentParser], object] = lambda parser: None,
             examples: tuple = (), exits: tuple = ()):
        def register(handler: Callable[[argparse.Namespace], int]):
            self.verbs.append(Verb(name, help, arguments, handler, tuple(examples), tuple(exits)))
            return handler
        return register


def add_verbs(subparsers, verbs, listed: bool = True) -> None:
    """A parser per verb, with its help, its arguments and its handler; `listed`: argparse lists the verbs
    in the parent's help (`batchd --help` lists them itself, grouped)."""
    for entry in verbs:
        texts = entry.parser_texts()
        if not listed:
            del texts["help"]
        sub = subparsers.add_parser(entry.name, **texts)
        entry.arguments(sub)
        sub.set_defaults(handler=entry.handler)


# -- what every verb shares
SPIDER_HELP = "path/file.py:Class or module:Class (default: BATCHD_SPIDER, or SPIDER in the config file)"


def spider_and_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spider", nargs="?", metavar="SPIDER", help=f"the spider: {SPIDER_HELP}")
    config_and_store(parser)


def config_and_store(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE",
                        help=f"the TOML config file (default: ${ENV_CONFIG}, else ./{LOCAL_CONFIG_FILE} if it exists, "
                             f"else {DEFAULT_CONFIG_FILE} if it exists)")
    parser.add_argument("--store", metavar="URL",
                        help="the task store: mysql://user:pass@host:3306/db or sqlite:///PATH (default: STORE, "
                             f"else MYSQL_URL, else ./{EMBEDDED_FILE} on a terminal)")


def config_files(args: argparse.Namespace, role: Optional[str] = None) -> list:
    """The main config file, and for a named instance of a role in INSTANCE_ROLES its `ROLE-NAME.toml`
    beside it (batchd-worker@NAME reads worker-NAME.toml, batchd-master@NAME master-NAME.toml)."""
    main = args.config or found_config_file()[0]
    files = [main] if main else []
    instance = getattr(args, "instance", None)
    if instance and role in INSTANCE_ROLES:
        overlay = os.path.join(os.path.dirname(os.path.abspath(main or DEFAULT_CONFIG_FILE)), f"{role}-{instance}.toml")
        if os.path.exists(overlay):
            files.append(overlay)
    return [os.path.abspath(path) for path in files]


def config_origin(args: argparse.Namespace) -> str:
    """Which config file the command reads and how it was found, for the first log line and status's header:
    `/srv/crawl/batchd.toml (./batchd.toml)`, `/etc/batchd/batchd.toml (the system's)`."""
    if args.config:
        return f"{os.path.abspath(args.config)} (--config)"
    path, how = found_config_file()
    return f"{os.path.abspath(path)} ({how})" if path else how


def announce_config(args: argparse.Namespace) -> None:
    """A supervisor's first log line (after the embedded store's, when it uses one): the config file it reads
    (in a folder with a batchd.toml of its own, that one). Logged once the command's own checks passed, so
    that a command refused still says so in one line."""
    log.info("config %s", config_origin(args))


def spider_source(args: argparse.Namespace, files: list, overrides: dict, read_only: bool = False) -> tuple:
    """(SpiderSource, the settings known before the spider is imported). `read_only`: for a verb that only
    reads (status, failed, quality, check), which must not make the embedded store's file."""
    overrides = with_store(args, files, overrides, read_only)
    settings = load_settings({}, config_files=files, overrides=overrides)
    path = args.spider or settings.SPIDER
    if not path:
        raise ConfigError("no spider: name it (batchd run path/file.py:Class), or set BATCHD_SPIDER "
                          "or SPIDER in the config file")
    return SpiderSource(absolute_spider_path(path), tuple(files), overrides), settings


def with_store(args: argparse.Namespace, files: list, overrides: dict, read_only: bool = False) -> dict:
    """The command line's settings, with the store it names, or the embedded one when nothing names
    a store: `batchd.db` in the working directory, on a terminal only. Under systemd a missing store
    is a configuration error, never a silent local crawl; so is a missing `batchd.db` to a verb that
    only reads."""
    if getattr(args, "store", None):
        return dict(overrides, STORE=args.store)
    settings = load_settings({}, config_files=files, overrides=overrides)
    if store_url(settings):
        return overrides
    if under_systemd():
        raise ConfigError("no store configured: set MYSQL_URL (and REDIS_URL), or STORE, in the config file; "
                          "under systemd batchd does not fall back to a local SQLite file")
    embedded = f"sqlite:///{os.path.abspath(EMBEDDED_FILE)}"
    if read_only and not os.path.exists(EMBEDDED_FILE):
        raise ConfigError(f"no store here yet: nothing names one (STORE or MYSQL_URL in the config, --store) and "
                          f"there is no ./{EMBEDDED_FILE}; {MAKE_STORE}")
    if not getattr(args, "embedded_announced", False):
        args.embedded_announced = True
        setup_logging(settings.LOG_LEVEL)
        log.info("no MySQL / Redis configured: using the embedded store %s (tasks, queue and items in one "
                 "SQLite file; --store or BATCHD_STORE names another)", embedded)
    return dict(overrides, STORE=embedded)


def runtime_from_args(args: argparse.Namespace, read_only: bool = False) -> Runtime:
    """The spider's Runtime on the command's settings; `read_only` (status, failed, quality, check): an SQLite
    store that does not exist is one line and exit 78, never a new empty file."""
    source, settings = spider_source(args, config_files(args), {}, read_only)
    setup_logging(settings.LOG_LEVEL)
    runtime = build_runtime(source)
    if read_only:
        existing_store(runtime.settings)
    return runtime


def existing_store(settings) -> None:
    """An SQLite store is made when it is first opened: a verb that only reads checks that it is there
    first (a MySQL database is the server's to have or not: the store says so when reached)."""
    path = sqlite_path(store_url(settings), "STORE" if settings.STORE else "MYSQL_URL")
    if path and not os.path.exists(path):
        raise ConfigError(f"no store at {os.path.abspath(path)} yet; {MAKE_STORE}")


def batch_option(parser: argparse.ArgumentParser, default: str = "the last one") -> None:
    parser.add_argument("--batch", type=positive, metavar="N", help=f"the batch (default: {default})")


def json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def workers_option(parser: argparse.ArgumentParser, value: Optional[int] = None) -> None:
    default = "WORKERS, else the CPU count" if value is None else value
    parser.add_argument("--workers", type=non_negative, default=value, metavar="N",
                        help=f"worker processes (default: {default})")


# -- the number types of several verbs
def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text}: must be 0 or more")
    return value


def positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text}: must be 1 or more")
    return value
