"""The Redis ports' Lua scripts as files (backends/mysql_redis/lua/, lua_scripts.py): each file compiles on the
real Redis as it stands and runs with `redis-cli --eval`; each port script names a file and each file is a
port's; a script's source reaches a server once, not at every call; and a failure inside a script leaves the
port as batchd's error, like any other Redis failure."""
import hashlib
import re
import subprocess
from importlib import resources
from urllib.parse import urlsplit

import pytest

from batchd.backends.mysql_redis import redis_batch, redis_bloom, redis_coordination, redis_hosts, redis_leases
from batchd.backends.mysql_redis.lua_scripts import LuaScript, script_source
from batchd.backends.mysql_redis.redis_batch import RedisCounters, RedisTally
from batchd.backends.mysql_redis.redis_client import connect_redis
from batchd.backends.mysql_redis.redis_hosts import RedisHostBreakers, RedisHostRates
from batchd.backends.mysql_redis.redis_leases import RedisLeaseQueue
from batchd.errors import BackendUnavailable, ConfigError
from batchd.hosts.breakers import FIELDS
from servers import PrivateRedis

PORT_MODULES = (redis_batch, redis_bloom, redis_coordination, redis_hosts, redis_leases)
LUA = resources.files("batchd.backends.mysql_redis") / "lua"


def lua_files() -> list:
    return sorted(entry.name.removesuffix(".lua") for entry in LUA.iterdir() if entry.name.endswith(".lua"))


def port_scripts() -> dict:
    """Every LuaScript a Redis port names: {file name: the ports naming it}."""
    named: dict = {}
    for module in PORT_MODULES:
        for port in vars(module).values():
            for member in vars(port).values() if isinstance(port, type) else ():
                if isinstance(member, LuaScript):
                    named.setdefault(member.name, []).append(port.__name__)
    return named


def test_each_port_script_is_a_file_and_each_file_a_ports_script():
    assert sorted(port_scripts()) == lua_files()
    assert len(lua_files()) == 13


@pytest.mark.parametrize("name", lua_files())
def test_every_script_file_compiles_on_redis_as_it_stands(client, name):
    source = script_source(name)
    assert client.script_load(source) == hashlib.sha1(source.encode()).hexdigest()


def test_a_script_file_runs_with_redis_cli_eval_as_it_stands(client, namespace, redis_url):
    url = urlsplit(redis_url)
    client.sadd(f"{namespace}:queued", "task:1")
    with resources.as_file(LUA / "known_tasks.lua") as path:
        said = subprocess.run(["redis-cli", "-h", url.hostname, "-p", str(url.port), "-n", url.path.strip("/"),
                               "--eval", str(path), f"{namespace}:queued", f"{namespace}:leases", ",",
                               "task:1", "task:2"], capture_output=True, text=True, timeout=30, check=True)
    assert said.stdout.split() == ["1", "0"]


def test_the_breakers_script_has_the_fields_of_hosts_breakers():
    written = re.search(r"^local FIELDS = \{(.*)\}$", script_source("step_host_breaker"), re.MULTILINE)
    assert written is not None
    assert tuple(re.findall(r"'([a-z_]+)'", written.group(1))) == FIELDS


def command_calls(client) -> dict:
    stats = client.info("commandstats")
    return {name: stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("eval", "evalsha", "script|load")}


SCRIPT_CALLS = 13     # by run_every_script: release and hand_back both run release_leases.lua


def run_every_script(client, namespace: str, flush: int) -> None:
    """At least one call of each of the 12 scripts, through the ports."""
    url = "redis://private"
    leases = RedisLeaseQueue(url, namespace, client)
    leases.push(1, [{"id": n, "url": f"http://example.com/{n}"} for n in range(1, 4)], "id")
    leases.count_attempts([1, 2, 3])
    taken = leases.lease_many([f"host:1:{flush}:{n}" for n in range(3)], 30)
    assert len(taken) == 3
    leases.renew(taken, 30)
    leases.release(taken[:1])
    leases.hand_back(taken[1:2])
    leases.give_back(taken[2:])
    leases.expire_leases_of("host:1:")
    leases.reclaim_expired(10)
    leases.known(["1", "2"])
    RedisHostRates(url, namespace, client).reserve("example.com", 1000.0, 1)
    RedisHostBreakers(url, namespace, client).step("example.com", "trip", 1_800_000_000.0, (3, 5.0))
    RedisTally(url, namespace, client).restore_settled(1, 0, 0)
    RedisCounters(url, namespace, client).add_counts(1, {"items": 1}, "host:1:", flush)


def test_a_scripts_source_reaches_a_server_once_not_at_every_call():
    with PrivateRedis() as server:
        client = connect_redis(server.url())
        run_every_script(client, "first", 0)
        first = command_calls(client)
        assert first["eval"] == 0 and first["script|load"] == 12     # loaded at its first NOSCRIPT
        assert first["evalsha"] == SCRIPT_CALLS + 12                 # (the NOSCRIPT answers count)
        for flush in range(1, 21):
            run_every_script(client, "many", flush)
        many = command_calls(client)
        assert many["eval"] == 0 and many["script|load"] == 12
        assert many["evalsha"] - first["evalsha"] == 20 * SCRIPT_CALLS

        other_process = connect_redis(server.url())
        run_every_script(other_process, "other", 0)
        assert command_calls(client)["script|load"] == 12            # the server has them already

        client.script_flush()                                        # as a restart would
        run_every_script(client, "flushed", 0)
        assert command_calls(client)["script|load"] == 24            # each loaded again, once
        other_process.close()
        client.close()


def test_a_port_keeps_its_registered_script_across_calls(client, namespace, redis_url):
    leases = RedisLeaseQueue(redis_url, namespace, client)
    assert leases._known is leases._known
    assert leases._known is not RedisLeaseQueue(redis_url, namespace, client)._known    # per port, each its client's


def test_a_failure_inside_a_script_is_an_outage_and_a_refused_password_a_configuration_error():
    with PrivateRedis() as server:
        client = connect_redis(server.url())
        leases = RedisLeaseQueue(server.url(), "ns", client)
        leases.count_attempts([1])                          # registered and loaded
        client.config_set("maxmemory", 1)                   # every write refused: OOM inside the script
        try:
            with pytest.raises(BackendUnavailable, match="maxmemory"):
                leases.count_attempts([1])
        finally:
            client.config_set("maxmemory", 0)
        client.config_set("requirepass", "secret")          # this connection stays authenticated
        stranger = connect_redis(server.url())
        with pytest.raises(ConfigError, match="REDIS_URL"):
            RedisLeaseQueue(server.url(), "ns", stranger).count_attempts([1])
        stranger.close()
        client.close()
