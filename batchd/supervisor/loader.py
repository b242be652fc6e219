"""Finding the user's spider and building it with its settings and backends.

A spider is named `path/file.py:Class` or `module:Class` (the SPIDER argument, BATCHD_SPIDER,
or SPIDER in the config file). Every way that can fail (no such file, the file does not
import, no such class, not a BatchSpider) is a ConfigError naming the path: the process
exits 78 and systemd does not restart it in a loop.

The supervisor never imports the spider itself: its children do, after the fork, so that
user code never runs in the process that forks (no threads or sockets of it inherited) and
a reload (SIGHUP) picks up new spider code in the new children.
"""
import ast
import importlib
import importlib.machinery
import importlib.util
import os
import re
import sys
import tokenize
import traceback
from dataclasses import dataclass, field
from typing import Optional

from ..config import Settings, load_settings
from ..errors import ConfigError
from ..spider import BatchSpider
from ..runtime import Runtime

SPIDER_FORMS = "path/file.py:Class or module:Class"
# The class attributes that shape a spider's settings and task table: what a verb that only reads (status)
# takes from the spider's source without running it (read_spider).
SPIDER_ATTRIBUTES = ("__task_table__", "__item_table__", "__custom_setting__")


@dataclass(frozen=True)
class SpiderSource:
    """Everything a process needs to build the spider on its own: where the class is, which
    config files to read on top of its __custom_setting__, and the command line's settings."""

    path: str
    config_files: tuple = ()
    overrides: dict = field(default_factory=dict)

    def settings(self, spider_class: type[BatchSpider]) -> Settings:
        return load_settings(spider_class.__custom_setting__, config_files=list(self.config_files),
                             overrides=self.overrides)


def absolute_spider_path(spec: str) -> str:
    """`path/file.py:Class` made absolute (a daemon changes directory, children must still find it)."""
    target, sep, name = spec.rpartition(":")
    if sep and _names_a_file(target):
        return f"{os.path.abspath(target)}:{name}"
    return spec


def split_spec(spec: str) -> tuple:
    """(file or module, class name) of `path/file.py:Class` or `module:Class`."""
    target, sep, class_name = spec.rpartition(":")
    if not sep or not target or not class_name:
        raise ConfigError(f"spider {spec!r}: expected {SPIDER_FORMS}")
    return target, class_name


def load_spider_class(spec: str) -> type[BatchSpider]:
    target, class_name = split_spec(spec)
    module = _load_file(spec, target) if _names_a_file(target) else _import_module(spec, target)
    spider_class = getattr(module, class_name, None)
    if spider_class is None:
        spiders = sorted(name for name, value in vars(module).items()
                         if isinstance(value, type) and issubclass(value, BatchSpider) and value is not BatchSpider)
        defined = f" (it defines {', '.join(spiders)})" if spiders else ""
        raise ConfigError(f"spider {spec!r}: {target} has no class {class_name!r}{defined}")
    if not (isinstance(spider_class, type) and issubclass(spider_class, BatchSpider)):
        raise ConfigError(f"spider {spec!r}: {class_name} is not a subclass of batchd.BatchSpider")
    return spider_class


def _names_a_file(target: str) -> bool:
    return target.endswith(".py") or os.sep in target


def _load_file(spec: str, path: str):
    if not os.path.isfile(path):
        raise ConfigError(f"spider {spec!r}: file {path} not found")
    directory = os.path.dirname(os.path.abspath(path))
    if directory not in sys.path:
        sys.path.insert(0, directory)      # the spider's own helper modules sit beside it
    name = "batchd_spider_" + os.path.splitext(os.path.basename(path))[0]
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:     # no loader for its suffix: not *.py
        raise ConfigError(f"spider {spec!r}: cannot import {path}: not a Python file (name it *.py)")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as e:   # whatever the user's file raises, it is a spider that does not import
        sys.modules.pop(name, None)
        raise ConfigError(f"spider {spec!r}: cannot import {path}: {_where(e, path)}") from None
    return module


def _import_module(spec: str, name: str):
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())    # as `python -m` would: a module of the current directory
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and name.startswith(e.name):
            raise ConfigError(f"spider {spec!r}: no module named {e.name!r}") from None
        raise ConfigError(f"spider {spec!r}: cannot import {name}: {_where(e, None)}") from None
    except Exception as e:   # whatever the user's module raises, it is a spider that does not import
        raise ConfigError(f"spider {spec!r}: cannot import {name}: {_where(e, None)}") from None


def _where(error: Exception, path: Optional[str]) -> str:
    """`NameError: name 'x' is not defined (spider.py line 12)`: the error and the user's line."""
    if isinstance(error, SyntaxError):        # its own file and line: the spider's, or a module it imports
        where = f" ({os.path.basename(error.filename)} line {error.lineno})" if error.filename else ""
        return f"{type(error).__name__}: {error.msg}{where}"
    text = f"{type(error).__name__}: {error}"
    frames = traceback.extract_tb(error.__traceback__)
    ours = [f for f in frames if path and os.path.abspath(f.filename) == os.path.abspath(path)] or frames[-1:]
    return f"{text} ({os.path.basename(ours[-1].filename)} line {ours[-1].lineno})" if ours else text


def build_runtime(source: SpiderSource, keep_alive: bool = True) -> Runtime:
    """Import the class, make the spider and its runtime on the settings the source names. A class without
    a valid __task_table__, or settings that name no store or a bad one, raise their ConfigError here,
    not mid-loop (the store object is made, not yet connected: batchd/backends/ picks it)."""
    runtime = Runtime.create(load_spider_class(source.path), keep_alive, source.overrides, list(source.config_files))
    runtime.store
    return runtime


# -- reading a spider without running it
@dataclass(frozen=True)
class SpiderReading:
    """What a spider's source says of its class, read without running a line of it: each of SPIDER_ATTRIBUTES
    it assigns a literal (`values`; one it leaves alone keeps BatchSpider's default), and those it could not
    read, with why (`unread`). `trouble`: the file's own fault, when it does not parse."""

    class_name: str
    values: dict
    unread: dict
    trouble: str = ""

    def stand_in(self) -> type[BatchSpider]:
        """A BatchSpider with those attributes and no code: enough for a Runtime that only reads the store."""
        return type(self.class_name, (BatchSpider,), dict(self.values, __module__=__name__))


def read_spider(spec: str) -> SpiderReading:
    """The spider's class attributes from its source (its syntax tree; line by line when it does not parse).
    A file or module it cannot find or read leaves every attribute unread."""
    target, class_name = split_spec(spec)
    path = target if _names_a_file(target) else _module_file(target)
    if path is None:
        return _unread(class_name, f"no file found for module {target}")
    try:
        with tokenize.open(path) as f:
            source = f.read()
    except (OSError, SyntaxError, UnicodeDecodeError) as e:
        return _unread(class_name, f"cannot read {path}: {getattr(e, 'strerror', None) or e}")
    try:
        tree = ast.parse(source, path)
    except SyntaxError as e:
        return _read_lines(source, class_name, f"{os.path.basename(path)} line {e.lineno}: SyntaxError: {e.msg}")
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
    if node is None:
        return _unread(class_name, f"{os.path.basename(path)} defines no class {class_name} at its top level")
    assigned: dict = {}
    for statement in node.body:        # the last assignment wins, as when the class is made
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            name, value = statement.targets[0], statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            name, value = statement.target, statement.value
        else:
            continue
        if isinstance(name, ast.Name) and name.id in SPIDER_ATTRIBUTES:
            assigned[name.id] = value
    foreign = [ast.unparse(base) for base in node.bases if not _names_batch_spider(base)]
    values, unread = {}, {}
    for attribute in SPIDER_ATTRIBUTES:
        if attribute in assigned:
            try:
                values[attribute] = ast.literal_eval(assigned[attribute])
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                unread[attribute] = "not a literal"
        elif foreign:
            unread[attribute] = f"may come from {', '.join(foreign)}"
    return SpiderReading(class_name, values, unread)


def _unread(class_name: str, why: str) -> SpiderReading:
    return SpiderReading(class_name, {}, dict.fromkeys(SPIDER_ATTRIBUTES, why))


def _names_batch_spider(base: ast.expr) -> bool:
    return (isinstance(base, ast.Name) and base.id == "BatchSpider") or \
        (isinstance(base, ast.Attribute) and base.attr == "BatchSpider")


def _read_lines(source: str, class_name: str, trouble: str) -> SpiderReading:
    """A file that does not parse: the attributes assigned on one line each in the class's block (indented,
    after `class NAME`); the rest unread. Its bases are not trusted: what it inherits stays unread too."""
    lines = source.splitlines()
    start = next((i for i, line in enumerate(lines) if re.match(rf"class\s+{re.escape(class_name)}\b", line)), None)
    if start is None:
        return SpiderReading(class_name, {}, dict.fromkeys(SPIDER_ATTRIBUTES, "the file does not parse"), trouble)
    values = {}
    for line in lines[start + 1:]:
        if line.strip() and not line[0].isspace() and not line.lstrip().startswith("#"):
            break          # the class's block is over
        match = re.match(r"\s+(__\w+__)\s*(:[^=]*)?=", line)
        if not match or match.group(1) not in SPIDER_ATTRIBUTES:
            continue
        try:
            statement = ast.parse(line.strip()).body[0]
            values[match.group(1)] = ast.literal_eval(statement.value)    # type: ignore[attr-defined]
        except (ValueError, TypeError, SyntaxError, AttributeError, IndexError, MemoryError, RecursionError):
            continue
    unread = {a: "the file does not parse" for a in SPIDER_ATTRIBUTES if a not in values}
    return SpiderReading(class_name, values, unread, trouble)


def _module_file(name: str) -> Optional[str]:
    """The source file of module `name`, found as an import would (the working directory first, then
    sys.path), without importing it or its packages."""
    search = [os.getcwd()] + [p for p in sys.path if p]
    path: Optional[str] = None
    for part in name.split("."):
        found = importlib.machinery.PathFinder.find_spec(part, search)
        if found is None:
            return None
        if found.submodule_search_locations:
            search, path = list(found.submodule_search_locations), found.origin
        else:
            search, path = [], found.origin
    return path if path and path.endswith(".py") else None
