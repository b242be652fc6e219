"""The MySQL + Redis backend: the task table, the batch record and the items in MySQL (or any store
of the user's own), every queue-side port in Redis, so that masters and workers on any number of
hosts share them."""
from ...errors import ConfigError
from ..ports import Backend, SeenFilter, SupervisorPorts
from ..store import BatchStore
from .mysql import MysqlBatchStore
from .redis_client import connect_redis
from .redis_bloom import RedisBloomFilter
from .redis_batch import RedisCounters, RedisSeenFilter, RedisTally
from .redis_coordination import RedisMasterLocks, RedisNamespaceRecord, RedisStatusBoard, RedisWake
from .redis_hosts import RedisHostBreakers, RedisHostRates, RedisRenderChoices
from .redis_leases import RedisLeaseQueue


def open_store(url: str, setting: str = "MYSQL_URL") -> MysqlBatchStore:
    store = MysqlBatchStore(url)
    store.setting = setting
    return store


def open_backend(store: BatchStore, namespace: str, settings) -> Backend:
    """Every port of `namespace`: `store` for the tasks, Redis (REDIS_URL) for the rest, one client."""
    url = redis_url(settings)
    client = connect_redis(url, sentinel_password=settings.REDIS_SENTINEL_PASSWORD)
    return Backend(store=store, leases=RedisLeaseQueue(url, namespace, client),
                   locks=RedisMasterLocks(url, namespace, client), wake=RedisWake(url, namespace, client),
                   board=RedisStatusBoard(url, namespace, client), seen=request_filter(settings, url, namespace, client),
                   namespaces=RedisNamespaceRecord(url, namespace, client), tally=RedisTally(url, namespace, client),
                   counters=RedisCounters(url, namespace, client),
                   rates=RedisHostRates(url, namespace, client), breakers=RedisHostBreakers(url, namespace, client),
                   renders=RedisRenderChoices(url, namespace, client), closers=(client.close,))


def open_supervisor_ports(settings, namespace: str, timeout: float) -> SupervisorPorts:
    url = redis_url(settings)
    client = connect_redis(url, timeout=timeout, sentinel_password=settings.REDIS_SENTINEL_PASSWORD)
    return SupervisorPorts(board=RedisStatusBoard(url, namespace, client), leases=RedisLeaseQueue(url, namespace, client),
                           wake=RedisWake(url, namespace, client), tally=RedisTally(url, namespace, client),
                           counters=RedisCounters(url, namespace, client),
                           close=client.close, breakers=RedisHostBreakers(url, namespace, client))


def request_filter(settings, url: str, namespace: str, client) -> SeenFilter:
    """REQUEST_FILTER's kind: exact (a set of fingerprints) or bloom (redis_bloom.py)."""
    if settings.REQUEST_FILTER == "bloom":
        return RedisBloomFilter(url, namespace, client, settings.REQUEST_FILTER_CAPACITY,
                                settings.REQUEST_FILTER_ERROR_RATE)
    return RedisSeenFilter(url, namespace, client)


def redis_url(settings) -> str:
    if not settings.REDIS_URL:
        raise ConfigError("no Redis configured: set BATCHD_REDIS_URL (redis://host:6379/0, or "
                          "redis+sentinel://host:26379,host2:26379/SERVICE under Sentinel) "
                          "or REDIS_URL in the config file")
    return settings.REDIS_URL
