"""REDIS_URL under Redis Sentinel: redis+sentinel://HOST:PORT[,...]/SERVICE[/DB], the Sentinels' password apart
(REDIS_SENTINEL_PASSWORD), `batchd check` naming the primary and its replicas, and a client that follows a
failover. A primary, a replica and three Sentinels of the test's own (tests/servers.py SentinelGroup)."""
import time

import pytest

from batchd.backends.mysql_redis.redis_client import SentinelService, connect_redis, parse_sentinel_url
from batchd.errors import ConfigError
from harness import wait_for
from servers import SentinelGroup
from taskdb import MysqlBackend
from supervised import batchd

SEED = "spiders/seed.py:CrawlTask"


@pytest.fixture
def group():
    with SentinelGroup() as sentinels:
        yield sentinels


def test_a_sentinel_url_names_the_sentinels_the_service_and_the_database():
    assert parse_sentinel_url("redis+sentinel://:pw@h1:26380,h2,[::1]:26381/news/3") == SentinelService(
        (("h1", 26380), ("h2", 26379), ("::1", 26381)), "news", 3, None, "pw")
    assert parse_sentinel_url("redis+sentinel://user:p%40ss@h1:1/svc") == SentinelService(
        (("h1", 1),), "svc", 0, "user", "p@ss")
    for bad, words in (("redis+sentinel://:secret@/svc", "names no Sentinel"),
                       ("redis+sentinel://:secret@h1:1", "must end in /SERVICE"),
                       ("redis+sentinel://:secret@h1:1/svc/x", "must end in /SERVICE"),
                       ("redis+sentinel://:secret@h1:port/svc", "'h1:port' is not HOST:PORT")):
        with pytest.raises(ConfigError) as raised:
            parse_sentinel_url(bad)
        assert str(raised.value).startswith("setting REDIS_URL: redis+sentinel://:***@") and words in str(raised.value)
        assert "secret" not in str(raised.value)


def test_check_names_the_primary_and_its_replicas(group, mysql_url, failed_items_path):
    backend = MysqlBackend(mysql_url, group.url(0), failed_items_path, group.sentinel_password)
    try:
        backend.create_tasks(["http://127.0.0.1:1/a"])
        result = batchd("check", SEED, backend=backend)
        assert result.returncode == 0, result.stdout + result.stderr
        primary, replica = group.primary_port(), group.replica.port
        assert (f"primary 127.0.0.1:{primary}, replicas 127.0.0.1:{replica} of service {group.service} "
                "(3 Sentinels)") in result.stdout, result.stdout
        assert group.password not in result.stdout + result.stderr
        assert group.sentinel_password not in result.stdout + result.stderr
        refused = batchd("check", SEED, backend=backend, env={"BATCHD_REDIS_SENTINEL_PASSWORD": "wrong"})
        assert refused.returncode == 78, refused.stdout + refused.stderr
        assert "FAIL  queue       setting REDIS_SENTINEL_PASSWORD: the Sentinels of redis+sentinel://:***@" \
            in refused.stdout and group.sentinel_password not in refused.stdout + refused.stderr
    finally:
        backend.close()


def test_a_client_follows_a_failover(group):
    client = connect_redis(group.url(2), timeout=2, sentinel_password=group.sentinel_password)
    client.set("before", "1")
    client.wait(1, 2000)                         # the replica has it before the primary dies
    old = group.primary_port()
    killed = time.monotonic()
    group.kill_primary()
    failover = group.wait_for_failover(old)

    def written() -> bool:
        try:
            return bool(client.set("after", "1"))
        except Exception:           # the client's own errors while the Sentinels have not promoted yet
            return False
    wait_for(written, timeout=failover + 5, message="a write to the promoted replica")
    back = time.monotonic() - killed
    assert client.get("before") == b"1" and group.primary_port() != old
    print(f"SENTINEL failover {failover:.1f} s; the client wrote again {back:.1f} s after the kill")
