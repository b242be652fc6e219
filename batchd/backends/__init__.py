"""Backends, and the one place that picks one.

A backend package provides, for a namespace, every port of batchd/backends/ports.py beside the store
(batchd/backends/store.py):

    mysql_redis/   MySQL (or a store of the user's own) for the tasks, Redis for the rest: any number of hosts
    sqlite/        one SQLite file holds everything: one host, no servers
    memory/        one process (tests, small runs): the master and the worker run as threads

The store is named by URL (`STORE`, else `MYSQL_URL`: MySQL is the default, docs/architecture.md, Names):
`mysql://user:pass@host:3306/db`, or `sqlite:///relative/path.db` and `sqlite:////absolute/path.db`
(three slashes then the path, as SQLAlchemy writes it). A store given in code (`batch_store=`)
names its package itself (`BatchStore.served_by`).
"""
import importlib
import logging
from typing import Optional

from ..config import redact_url
from ..errors import ConfigError
from .ports import Backend, SupervisorPorts
from .store import BatchStore

log = logging.getLogger("batchd")

SQLITE_PREFIX = "sqlite:///"
MYSQL_SCHEMES = ("mysql", "mariadb")


def store_url(settings) -> Optional[str]:
    return settings.STORE or settings.MYSQL_URL


def open_store(settings) -> BatchStore:
    """The task store the settings name (ConfigError naming the setting when none or a bad one)."""
    url = store_url(settings)
    if not url:
        raise ConfigError("no store configured: set BATCHD_MYSQL_URL (mysql://user:pass@host:3306/db) "
                          "or BATCHD_STORE (mysql://... or sqlite:///PATH)")
    return store_from_url(url, "STORE" if settings.STORE else "MYSQL_URL")


def store_from_url(url: str, setting: str = "STORE") -> BatchStore:
    path = sqlite_path(url, setting)
    if path:
        return _package("sqlite").open_store(path)
    if url.split("://", 1)[0] in MYSQL_SCHEMES:
        return _package("mysql_redis").open_store(url, setting)
    raise ConfigError(f"setting {setting}: {redact_url(url)!r} is neither mysql://... nor sqlite:///PATH")


def sqlite_path(url: Optional[str], setting: str = "STORE") -> Optional[str]:
    """The file an sqlite:/// URL names; None for any other URL."""
    if not url or not url.startswith(SQLITE_PREFIX):
        return None
    path = url[len(SQLITE_PREFIX):]
    if not path:
        raise ConfigError(f"setting {setting}: {url!r} names no file (sqlite:///PATH)")
    return path


def open_backend(settings, namespace: str, store: Optional[BatchStore] = None) -> Backend:
    """Every port of `namespace`: for `store` (given in code), else for the store the settings name. Code that
    gives its store may give no settings (None): the store's defaults."""
    store = store if store is not None else open_store(settings)
    if settings is not None and settings.REQUEST_FILTER_ENABLE and settings.REQUEST_FILTER == "bloom" and store.served_by != "mysql_redis":
        log.info('REQUEST_FILTER = "bloom" is for Redis: %s keeps the exact request filter', store.describe())
    return _package(store.served_by).open_backend(store, namespace, settings)


def open_supervisor_ports(settings, namespace: str, timeout: float) -> Optional[SupervisorPorts]:
    """A supervisor's ports (status board, leases, wake-ups) with short timeouts; None when the settings
    name neither an SQLite store nor Redis."""
    path = sqlite_path(store_url(settings))
    if path:
        return _package("sqlite").open_supervisor_ports(path, namespace, timeout)
    if settings.REDIS_URL:
        return _package("mysql_redis").open_supervisor_ports(settings, namespace, timeout)
    return None


def _package(name: str):
    return importlib.import_module(f"{__name__}.{name}")
