"""What a batch keeps in Redis beside its queue: the tally of its settled tasks, its counters (in all and per
host, with each worker's gauges), and the requests it has made.

Keys (redis_keys.py): tally:<batch>, stats:<batch>, stats_flushes:<batch>, hosts:<batch>, host_gauges:<worker>,
seen, seen_ever.
"""
import json
from typing import Iterator, Optional

from ...hosts.counts import OTHER, sum_gauges
from ..ports import EVERY_BATCH
from .lua_scripts import LuaScript
from .redis_keys import SEEN_TTL, STATS_TTL, TALLY_TTL
from .redis_port import RedisPort, translated

HOSTS_A_PAGE = 1000      # hosts read with one HSCAN: host_counts goes through a batch's table this many at a time


class RedisSeenFilter(RedisPort):
    """The SeenFilter port: a set of fingerprints, with a TTL."""

    @translated
    def first_seen(self, batch_id: int, fingerprint: str) -> bool:
        key = self.keys.seen_ever if batch_id == EVERY_BATCH else self.keys.seen
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.sadd(key, f"{batch_id}:{fingerprint}")
            pipe.expire(key, SEEN_TTL)
            added, _ = pipe.execute()
        return bool(added)


class RedisTally(RedisPort):
    """The BatchTally port: one hash per batch."""

    _restore = LuaScript("restore_tally")

    @translated
    def add_settled(self, batch_id: int, done: int, failed: int) -> None:
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hincrby(self.keys.tally(batch_id), "done", done)
            pipe.hincrby(self.keys.tally(batch_id), "failed", failed)
            pipe.execute()

    @translated
    def settled(self, batch_id: int) -> Optional[tuple]:
        held, done, failed = self.redis.hmget(self.keys.tally(batch_id), "held", "done", "failed")
        return None if held is None else (int(done or 0), int(failed or 0))

    @translated
    def restore_settled(self, batch_id: int, done: int, failed: int) -> None:
        self._restore(keys=[self.keys.tally(batch_id)], args=[done, failed, TALLY_TTL])

    @translated
    def set_settled(self, batch_id: int, done: int, failed: int) -> None:
        key = self.keys.tally(batch_id)
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping={"done": done, "failed": failed, "held": 1})
            pipe.expire(key, TALLY_TTL)
            pipe.execute()


class RedisCounters(RedisPort):
    """The BatchCounters port: a hash of counters per batch, and a hash of the flushes it took."""

    _add = LuaScript("add_counts")

    @translated
    def add_counts(self, batch_id: int, counts, source: str, seq: int, hosts={}, host_cap: int = 0) -> None:
        pairs = [part for name, n in counts.items() for part in (name, int(n))]
        self._add(keys=[self.keys.stats(batch_id), self.keys.stats_flushes(batch_id), self.keys.hosts(batch_id)],
                  args=[source, seq, STATS_TTL, json.dumps(hosts), host_cap, OTHER] + pairs)

    @translated
    def counts(self, batch_id: int) -> dict:
        return {name.decode(): int(n) for name, n in self.redis.hgetall(self.keys.stats(batch_id)).items()}

    def host_counts(self, batch_id: int) -> Iterator[tuple]:
        seen, cursor = set(), None
        while cursor != 0:
            cursor, page = self._host_page(batch_id, cursor or 0)
            for host, counts in page.items():
                if host not in seen:        # (HSCAN may give a field twice while the hash grows)
                    seen.add(host)
                    yield host.decode(), json.loads(counts)

    @translated
    def _host_page(self, batch_id: int, cursor: int) -> tuple:
        return self.redis.hscan(self.keys.hosts(batch_id), cursor, count=HOSTS_A_PAGE)

    @translated
    def set_host_gauges(self, source: str, gauges, ttl: float) -> None:
        if gauges:
            self.redis.set(self.keys.host_gauges(source), json.dumps(gauges), px=max(1, int(ttl * 1000)))
        else:
            self.redis.delete(self.keys.host_gauges(source))

    @translated
    def host_gauges(self) -> dict:
        keys = list(self.redis.scan_iter(match=self.keys.host_gauges_pattern(), count=100))
        return sum_gauges(json.loads(value) for value in (self.redis.mget(keys) if keys else ()) if value is not None)


