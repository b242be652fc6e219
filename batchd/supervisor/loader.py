"""Finding the user's spider and building it with its settings and backends.

A spider is named `path/file.py:Class` or `module:Class` (the SPIDER argument, BATCHD_SPIDER,
or SPIDER in the config file). Every way that can fail (no such file, the file does not
import, no such class, not a BatchSpider) is a ConfigError naming the path: the process
exits 78 and systemd does not restart it in a loop.

The supervisor never imports the spider itself: its children do, after the fork, so that
user code never runs in the process that forks (no threads or sockets of it inherited) and
a reload (SIGHUP) picks up new spider code in the new children.
"""
import importlib
import importlib.util
import os
import sys
import traceback
from dataclasses import dataclass, field
from typing import Optional

from ..config import Settings, load_settings
from ..errors import ConfigError
from ..spider import BatchSpider
from ..runtime import Runtime

SPIDER_FORMS = "path/file.py:Class or module:Class"


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


def load_spider_class(spec: str) -> type[BatchSpider]:
    target, sep, class_name = spec.rpartition(":")
    if not sep or not target or not class_name:
        raise ConfigError(f"spider {spec!r}: expected {SPIDER_FORMS}")
    module = _load_file(spec, target) if _names_a_file(target) else _import_module(spec, target)
    spider_class = getattr(module, class_name, None)
    if spider_class is None:
        raise ConfigError(f"spider {spec!r}: {target} has no class {class_name!r}")
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
    text = f"{type(error).__name__}: {error}"
    if isinstance(error, SyntaxError):
        return text
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
