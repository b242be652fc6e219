"""Task stores, and the one rule that picks a store from the settings.

`STORE` names it by URL: `mysql://user:pass@host:3306/db` or `sqlite:///relative/path.db`,
`sqlite:////absolute/path.db` (three slashes then the path, as SQLAlchemy writes it). Without
STORE, `MYSQL_URL` names a MySQL store, as SPEC makes MySQL the default.
"""
from typing import Optional

from ..config import redact_url
from ..errors import ConfigError

SQLITE_PREFIX = "sqlite:///"


def store_url(settings) -> Optional[str]:
    return settings.STORE or settings.MYSQL_URL


def store_from_settings(settings):
    url = store_url(settings)
    if not url:
        raise ConfigError("no store configured: set BATCHD_MYSQL_URL (mysql://user:pass@host:3306/db) "
                          "or BATCHD_STORE (mysql://... or sqlite:///PATH)")
    return store_from_url(url, "STORE" if settings.STORE else "MYSQL_URL")


def sqlite_path(url: Optional[str], setting: str = "STORE") -> Optional[str]:
    """The file an sqlite:/// URL names; None for any other URL."""
    if not url or not url.startswith(SQLITE_PREFIX):
        return None
    path = url[len(SQLITE_PREFIX):]
    if not path:
        raise ConfigError(f"setting {setting}: {url!r} names no file (sqlite:///PATH)")
    return path


def store_from_url(url: str, setting: str = "STORE"):
    path = sqlite_path(url, setting)
    if path:
        from .sqlite import SqliteBatchStore
        return SqliteBatchStore(path)
    if url.split("://", 1)[0] in ("mysql", "mariadb"):
        from .mysql import MysqlBatchStore
        return MysqlBatchStore(url)
    raise ConfigError(f"setting {setting}: {redact_url(url)!r} is neither mysql://... nor sqlite:///PATH")
