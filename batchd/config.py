"""Settings: one typed, frozen object built once and passed in at construction.

Precedence (SPEC Part 3): defaults < the spider's `__custom_setting__` < the TOML file
< `BATCHD_<NAME>` in the environment < the command line (or `settings=` in code).
Every name below is the name an operator writes in any of those places.
"""
import dataclasses
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


@dataclass(frozen=True)
class Settings:
    # -- the batch (SPEC Part 1)
    BATCH_INTERVAL: int = 7
    BATCH_INTERVAL_UNIT: str = "day"
    BATCH_MONITOR_INTERVAL: float = 10.0
    BATCH_LOST_TASK_STALE: float = 600.0
    BATCH_PUSH_LIMIT: int = 5000
    BATCH_TASK_ID_FIELD: str = "id"
    BATCH_TASK_STATE_FIELD: str = "batch_status"
    BATCH_TASK_TIME_FIELD: str = "update_time"
    BATCH_TASK_MAX_ATTEMPTS: int = 10
    BATCH_RESET_CHUNK: int = 5000
    NAMESPACE: Optional[str] = None
    # -- crawling
    SPIDER_THREAD_COUNT: int = 4
    SPIDER_MAX_RETRY_TIMES: int = 3
    REQUEST_TIMEOUT: float = 30.0
    REQUEST_FILTER_ENABLE: bool = False
    # -- items
    ITEM_FLUSH_SIZE: int = 500
    ITEM_FLUSH_INTERVAL: float = 1.0
    FAILED_ITEMS_PATH: Optional[str] = None
    # -- connections and processes
    STORE: Optional[str] = None      # mysql://... or sqlite:///PATH; default: MYSQL_URL
    MYSQL_URL: Optional[str] = None
    REDIS_URL: Optional[str] = None
    SPIDER: Optional[str] = None
    WORKERS: Optional[int] = None
    MASTER_LOCK_TIMEOUT: float = 30.0
    CHILD_TIMEOUT: float = 60.0
    STOP_TIMEOUT: float = 90.0
    STATUS_INTERVAL: float = 5.0   # seconds between a supervisor's STATUS= lines and its Redis snapshots
    LOG_LEVEL: str = "INFO"

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
    for name in ("BATCH_INTERVAL", "BATCH_PUSH_LIMIT", "BATCH_TASK_MAX_ATTEMPTS", "BATCH_RESET_CHUNK",
                 "SPIDER_THREAD_COUNT", "ITEM_FLUSH_SIZE", "BATCH_MONITOR_INTERVAL",
                 "BATCH_LOST_TASK_STALE", "ITEM_FLUSH_INTERVAL", "REQUEST_TIMEOUT",
                 "MASTER_LOCK_TIMEOUT", "CHILD_TIMEOUT", "STOP_TIMEOUT", "STATUS_INTERVAL"):
        if getattr(s, name) <= 0:
            raise ConfigError(f"setting {name}: must be greater than 0, got {getattr(s, name)!r}")
    if s.SPIDER_MAX_RETRY_TIMES < 0:
        raise ConfigError(f"setting SPIDER_MAX_RETRY_TIMES: must be 0 or more, got {s.SPIDER_MAX_RETRY_TIMES}")
    if s.WORKERS is not None and s.WORKERS < 0:
        raise ConfigError(f"setting WORKERS: must be 0 or more, got {s.WORKERS}")


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
