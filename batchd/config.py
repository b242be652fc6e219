"""Settings: one typed, frozen object built once and passed in at construction.

Precedence (SPEC Part 3): defaults < the spider's `__custom_setting__` < the TOML file
< `BATCHD_<NAME>` in the environment < the command line (or `settings=` in code).
Every name below is the name an operator writes in any of those places.
"""
import dataclasses
import math
import os
import re
import tomllib
import typing
from dataclasses import dataclass
from typing import Any, Mapping, Optional
from urllib.parse import urlsplit, urlunsplit

from .errors import ConfigError

DEFAULT_CONFIG_FILE = "/etc/batchd/batchd.toml"
ENV_PREFIX = "BATCHD_"
ENV_CONFIG = "BATCHD_CONFIG"
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
NAMESPACE_PATTERN = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")
INTERVAL_UNITS = ("day", "hour")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


KB, MB, GB = 1024, 1024 ** 2, 1024 ** 3
DAY = 86400.0


def setting(default, meaning: str, low=None, high=None):
    """One setting's whole declaration: its default, its one-line meaning and, for a number, the
    bounds `validate()` holds it to (inclusive; None: no bound on that side)."""
    return dataclasses.field(default=default, metadata={"meaning": meaning, "low": low, "high": high})


@dataclass(frozen=True)
class Settings:
    # -- the batch (SPEC Part 1)
    BATCH_INTERVAL: int = setting(7, "a new batch opens this many days (hours) after the last one", 1, 10000)
    BATCH_INTERVAL_UNIT: str = setting("day", "day or hour")
    BATCH_MONITOR_INTERVAL: float = setting(10.0, "seconds between two patrols of the master", 0.05, 3600)
    BATCH_LOST_TASK_STALE: float = setting(600.0, "the lease: seconds a task's holder may go without renewing it",
                                           0.1, 7 * DAY)
    BATCH_PUSH_LIMIT: int = setting(5000, "most tasks waiting in the queue", 1, 1_000_000)
    BATCH_TASK_ID_FIELD: str = setting("id", "the task table's primary key column")
    BATCH_TASK_STATE_FIELD: str = setting("batch_status", "the task table's state column")
    BATCH_TASK_TIME_FIELD: str = setting("update_time", "the task table's update-time column")
    BATCH_TASK_MAX_ATTEMPTS: int = setting(10, "leases of one task in one batch before it is failed", 1, 1000)
    BATCH_RESET_CHUNK: int = setting(5000, "rows set back to pending per statement when a batch opens",
                                     1, 1_000_000)
    NAMESPACE: Optional[str] = setting(None, "prefix of every queue key (default: the task table)")
    # -- crawling
    SPIDER_THREAD_COUNT: int = setting(4, "download threads per worker process", 1, 256)
    SPIDER_MAX_RETRY_TIMES: int = setting(3, "retries of a failing request", 0, 100)
    REQUEST_TIMEOUT: float = setting(30.0, "seconds to connect, and between two reads of an answer", 0.1, 3600)
    DOWNLOAD_TIMEOUT: float = setting(180.0, "seconds a whole download (headers and body) may take", 0.1, DAY)
    DOWNLOAD_MAXSIZE: int = setting(64 * MB, "bytes of a decoded response body, at most", 1 * KB, 16 * GB)
    TASK_TIMEOUT: float = setting(300.0, "seconds a task may be processed before it is failed (0: no limit)",
                                  0, 7 * DAY)
    REQUEST_FILTER_ENABLE: bool = setting(False, "drop a request already made in this batch")
    # -- items
    ITEM_FLUSH_SIZE: int = setting(500, "items per flush, at most", 1, 100_000)
    ITEM_FLUSH_INTERVAL: float = setting(1.0, "seconds between two flushes, at most", 0.01, 3600)
    ITEM_FLUSH_GIVE_UP: float = setting(120.0, "seconds a flush waits out an outage before its items go to "
                                               "FAILED_ITEMS_PATH", 0, DAY)
    FAILED_ITEMS_PATH: Optional[str] = setting(None, "where items the database will not take are kept")
    # -- connections and processes
    STORE: Optional[str] = setting(None, "the task store: mysql://... or sqlite:///PATH (default: MYSQL_URL)")
    MYSQL_URL: Optional[str] = setting(None, "mysql://user:pass@host:3306/db")
    REDIS_URL: Optional[str] = setting(None, "redis://host:6379/0")
    SPIDER: Optional[str] = setting(None, "path/file.py:Class or module:Class")
    WORKERS: Optional[int] = setting(None, "worker processes per supervisor (default: the CPU count)", 0, 1024)
    OUTAGE_TIMEOUT: float = setting(600.0, "--once: seconds an outage after start is waited out before exit 69",
                                    1, 7 * DAY)
    MASTER_LOCK_TIMEOUT: float = setting(30.0, "seconds the master's lock outlives a master that stopped "
                                               "renewing it", 1, 3600)
    CHILD_TIMEOUT: float = setting(60.0, "seconds a child may go without progress before it is replaced", 1, 3600)
    STOP_TIMEOUT: float = setting(90.0, "seconds a warm stop may take", 0.1, DAY)
    STATUS_INTERVAL: float = setting(5.0, "seconds between a supervisor's STATUS= lines and snapshots", 0.1, 3600)
    LOG_LEVEL: str = setting("INFO", "DEBUG, INFO, WARNING or ERROR")

    def namespace_for(self, task_table: str) -> str:
        return self.NAMESPACE or task_table

    def failed_items_path(self) -> str:
        return self.FAILED_ITEMS_PATH or default_failed_items_path()

    def replace(self, **changes) -> "Settings":
        return dataclasses.replace(self, **changes)


def _base_type(annotation) -> tuple:
    """(int, False) for `int`, (int, True) for `Optional[int]`."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return (args[0], True) if args else (annotation, False)


SETTING_TYPES = {f.name: _base_type(f.type) for f in dataclasses.fields(Settings)}


def default_failed_items_path(environ: Mapping[str, str] = os.environ) -> str:
    state_dirs = environ.get("STATE_DIRECTORY")
    base = state_dirs.split(":")[0] if state_dirs else "."
    return os.path.join(base, "failed_items.jsonl")


def load_settings(custom: Optional[Mapping[str, Any]] = None, *, config_files=None,
                  environ: Mapping[str, str] = os.environ,
                  overrides: Optional[Mapping[str, Any]] = None) -> Settings:
    """Merge the layers in precedence order; each bad name or value is a ConfigError naming it."""
    values: dict = {}
    values.update(_checked_layer(custom or {}, "__custom_setting__"))
    for path in config_paths(config_files, environ):
        values.update(_checked_layer(read_config_file(path), path))
    values.update(_checked_layer(settings_from_environ(environ), "the environment"))
    values.update(_checked_layer({k: v for k, v in (overrides or {}).items() if v is not None},
                                 "the command line"))
    settings = Settings(**values)
    validate(settings)
    return settings


def config_paths(config_files, environ: Mapping[str, str]) -> list:
    """The files to read: the ones asked for, else BATCHD_CONFIG, else the /etc file if present."""
    if config_files:
        paths = [config_files] if isinstance(config_files, (str, os.PathLike)) else list(config_files)
    elif environ.get(ENV_CONFIG):
        paths = [environ[ENV_CONFIG]]
    elif os.path.exists(DEFAULT_CONFIG_FILE):
        paths = [DEFAULT_CONFIG_FILE]
    else:
        paths = []
    return [os.fspath(p) for p in paths]


def read_config_file(path: str) -> dict:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file {path}: not found") from None
    except PermissionError:
        raise ConfigError(f"config file {path}: permission denied") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {path}: invalid TOML: {e}") from None
    for key, value in data.items():
        if isinstance(value, dict):
            raise ConfigError(f"config file {path}: unexpected table [{key}]; settings are top-level keys")
    return {key.upper(): value for key, value in data.items()}


def settings_from_environ(environ: Mapping[str, str]) -> dict:
    return {name[len(ENV_PREFIX):]: value for name, value in environ.items()
            if name.startswith(ENV_PREFIX) and name != ENV_CONFIG}


def _checked_layer(layer: Mapping[str, Any], source: str) -> dict:
    checked = {}
    for name, raw in layer.items():
        if name not in SETTING_TYPES:
            where = f"BATCHD_{name}" if source == "the environment" else name
            raise ConfigError(f"unknown setting {where!r} in {source}")
        checked[name] = coerce(name, raw, source)
    return checked


def coerce(name: str, raw: Any, source: str) -> Any:
    """Turn a raw value (a string from the environment, a TOML or Python value) into the setting's type."""
    base, optional = SETTING_TYPES[name]
    if raw is None:
        if optional:
            return None
        raise ConfigError(f"setting {name} in {source}: a value is required")
    try:
        return _convert(base, raw)
    except (TypeError, ValueError):
        raise ConfigError(f"setting {name} in {source}: {raw!r} is not a valid {base.__name__}") from None


def _convert(base, raw):
    if base is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ValueError(raw)
    if base in (int, float):
        if isinstance(raw, bool) or (base is int and isinstance(raw, float) and not raw.is_integer()):
            raise TypeError(raw)
        return base(str(raw).strip()) if isinstance(raw, str) else base(raw)
    if not isinstance(raw, str):
        raise TypeError(raw)
    return raw


def validate(s: Settings) -> None:
    for name in ("BATCH_TASK_ID_FIELD", "BATCH_TASK_STATE_FIELD", "BATCH_TASK_TIME_FIELD"):
        check_identifier(getattr(s, name), name)
    if s.BATCH_INTERVAL_UNIT not in INTERVAL_UNITS:
        raise ConfigError(f"setting BATCH_INTERVAL_UNIT: {s.BATCH_INTERVAL_UNIT!r} is not one of "
                          + ", ".join(INTERVAL_UNITS))
    if s.NAMESPACE is not None and not NAMESPACE_PATTERN.match(s.NAMESPACE):
        raise ConfigError(f"setting NAMESPACE: {s.NAMESPACE!r} may hold only letters, digits and _ . : -")
    if s.LOG_LEVEL.upper() not in LOG_LEVELS:
        raise ConfigError(f"setting LOG_LEVEL: {s.LOG_LEVEL!r} is not one of " + ", ".join(LOG_LEVELS))
    for f in dataclasses.fields(Settings):
        check_bounds(f.name, getattr(s, f.name), f.metadata)


def check_bounds(name: str, value, declaration: Mapping) -> None:
    """A number must be finite and within its declared bounds; the error names the setting and the value."""
    if value is None or isinstance(value, (bool, str)):
        return
    if not math.isfinite(value):
        raise ConfigError(f"setting {name}: {value!r} is not a finite number")
    low, high = declaration.get("low"), declaration.get("high")
    if low is not None and value < low:
        raise ConfigError(f"setting {name}: must be at least {low!r}, got {value!r}")
    if high is not None and value > high:
        raise ConfigError(f"setting {name}: must be at most {high!r}, got {value!r}")


def check_identifier(value: str, what: str) -> str:
    """An SQL identifier from settings or the spider: validated before it is ever quoted into SQL."""
    if not isinstance(value, str) or not IDENTIFIER.match(value):
        raise ConfigError(f"{what}: {value!r} is not a valid table or column name "
                          "(letters, digits and _, at most 64, not starting with a digit)")
    return value


def redact_url(url: Optional[str]) -> str:
    """A connection URL fit for a log line: the password replaced by ***."""
    if not url:
        return "(not set)"
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))
