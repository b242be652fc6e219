"""The Redis client of REDIS_URL: one server, or the primary of a service under Redis Sentinel.

    redis://[[USER]:PASSWORD@]HOST:PORT/DB        one server (rediss:// over TLS, unix:// a socket)
    redis+sentinel://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE[/DB]
                                                  the primary the Sentinels name for SERVICE

Under Sentinel the URL's password is Redis's own (the primary's and the replicas'); the Sentinels' password,
when they have one, is REDIS_SENTINEL_PASSWORD, kept apart. The client is redis-py's own
(`Sentinel.master_for`): its connections ask the Sentinels for the primary as they connect, and a connection
that meets a demoted primary (READONLY) or none at all is dropped, so the next call reaches whichever replica
was promoted. A caller sees the failover as a short outage (BackendUnavailable), which every process of batchd
already waits out: the master, the workers, the supervisor's snapshots, the CLI and `batchd web`.
"""
from dataclasses import dataclass
from typing import Optional
from urllib.parse import unquote, urlsplit

from ...config import redact_url
from ...errors import BackendUnavailable, ConfigError

SENTINEL_SCHEME = "redis+sentinel"
SENTINEL_PORT = 26379


@dataclass(frozen=True)
class SentinelService:
    sentinels: tuple            # ((host, port), ...)
    service: str
    db: int
    username: Optional[str]
    password: Optional[str]


def is_sentinel_url(url: str) -> bool:
    return url.lower().startswith(SENTINEL_SCHEME + "://")


def parse_sentinel_url(url: str) -> SentinelService:
    """The Sentinels, the service and the database of a redis+sentinel:// URL; a ConfigError names REDIS_URL and
    what is wrong (the URL shown with its password redacted)."""
    parts = urlsplit(url)
    where = f"setting REDIS_URL: {redact_url(url)}"
    hosts = parts.netloc.rpartition("@")[2]
    sentinels = tuple(_host_and_port(address, where) for address in hosts.split(",") if address)
    path = [unquote(piece) for piece in parts.path.split("/") if piece]
    if not sentinels:
        raise ConfigError(f"{where}: names no Sentinel (redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE[/DB])")
    if not path or len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
        raise ConfigError(f"{where}: must end in /SERVICE or /SERVICE/DB (the name the Sentinels monitor, a database "
                          "number)")
    userinfo = parts.netloc.rpartition("@")[0] if "@" in parts.netloc else ""
    username, _, password = userinfo.partition(":")
    return SentinelService(sentinels, path[0], int(path[1]) if len(path) == 2 else 0,
                           unquote(username) or None, unquote(password) or None)


def _host_and_port(address: str, where: str) -> tuple:
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        port_text = rest.lstrip(":")
    else:
        host, _, port_text = address.partition(":")
    if not host or (port_text and not port_text.isdigit()):
        raise ConfigError(f"{where}: {address!r} is not HOST:PORT")
    return host, int(port_text) if port_text else SENTINEL_PORT


def connect_redis(url: str, timeout: float = 30, sentinel_password: Optional[str] = None):
    """A client for REDIS_URL; the driver is imported only here. A short `timeout` suits a caller that
    must not block (the supervisor's loop)."""
    try:
        import redis
        import redis.sentinel
    except ImportError:
        raise ConfigError('REDIS_URL is set but the redis driver is missing: pip install "batchd[redis]"') from None
    timeouts = {"socket_timeout": timeout, "socket_connect_timeout": min(5, timeout)}
    if is_sentinel_url(url):
        service = parse_sentinel_url(url)
        sentinel = redis.sentinel.Sentinel(list(service.sentinels),
                                           sentinel_kwargs={"password": sentinel_password, **timeouts})
        return sentinel.master_for(service.service, db=service.db, username=service.username,
                                   password=service.password, health_check_interval=30,
                                   socket_timeout=timeout, socket_connect_timeout=min(5, timeout))
    try:
        return redis.Redis.from_url(url, health_check_interval=30, **timeouts)
    except ValueError as e:
        raise ConfigError(f"setting REDIS_URL: {redact_url(url)}: {e}") from None


def serving(client) -> Optional[str]:
    """Under Sentinel, which server serves the client now: "primary HOST:PORT, replicas HOST:PORT, ... of
    SERVICE (N Sentinels)"; None for a client of one server."""
    pool = client.connection_pool
    manager = getattr(pool, "sentinel_manager", None)
    if manager is None:
        return None
    host, port = manager.discover_master(pool.service_name)
    replicas = ", ".join(f"{h}:{p}" for h, p in manager.discover_slaves(pool.service_name)) or "none"
    return (f"primary {host}:{port}, replicas {replicas} of service {pool.service_name} "
            f"({len(manager.sentinels)} Sentinels)")


def sentinels_said(error, url: str) -> Exception:
    """No Sentinel named a primary: they refused REDIS_SENTINEL_PASSWORD (ConfigError), or none answered, or none
    knows a primary now (a failover under way: BackendUnavailable), in a line."""
    text = str(error)
    service = text.split("'")[1] if text.count("'") >= 2 else "?"
    if "AuthenticationError" in text or "NOAUTH" in text or "WRONGPASS" in text:
        return ConfigError(f"setting REDIS_SENTINEL_PASSWORD: the Sentinels of {redact_url(url)} refused it")
    return BackendUnavailable(f"Redis {redact_url(url)} unreachable: no Sentinel names a primary of {service!r} "
                              "(the Sentinels down, or a failover under way)", "Redis")
