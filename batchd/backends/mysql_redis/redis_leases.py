"""The lease queue in Redis: claimed tasks on their way from the master to the workers, under leases.

Keys (redis_keys.py): batch_pending, queued, leases, lease_owner, lease_since, attempts, and the namespace's
flags batch_done, paused, open_request, memory. A task taken is never popped and forgotten: lease_tasks.lua
pops it and leases it in one step, and it stays accounted for until its holder releases the lease to write
it back, or the master reclaims it.
"""
from typing import Iterable, Optional, Sequence, Union

from ...config import redact_url
from ...codec import decode_task, encode_task
from ...model import Lease, task_key
from ..ports import EVERY_BATCH, LeaseView, lease_view
from .lua_scripts import LuaScript
from .redis_bloom import drop_request_filters
from .redis_client import serving
from .redis_port import RedisPort, redis_response_error, translated


class RedisLeaseQueue(RedisPort):
    """The LeaseQueue port: batch_pending, queued, leases, lease_owner, attempts, batch_done."""

    backend_name = "Redis"
    _lease = LuaScript("lease_tasks")
    _renew = LuaScript("renew_leases")
    _release = LuaScript("release_leases")
    _reclaim = LuaScript("reclaim_expired_leases")
    _known = LuaScript("known_tasks")
    _give_back = LuaScript("give_back_leases")
    _expire_holder = LuaScript("expire_holder_leases")
    _count_attempts = LuaScript("count_attempts")

    def describe(self) -> str:
        """The URL (password redacted) and, under Sentinel, the primary it found and its replicas."""
        under_sentinel = serving(self.redis)
        return f"Redis {redact_url(self.url)}" + (f": {under_sentinel}" if under_sentinel else "")

    @translated
    def ping(self) -> None:
        self.redis.ping()

    @translated
    def clear_batch(self) -> None:
        # UNLINK, not DEL: a request filter of millions of fingerprints is freed in Redis's background thread.
        self.redis.unlink(*self.keys.batch_keys())
        drop_request_filters(self.redis, self.keys)

    @translated
    def forget_earlier_requests(self) -> None:
        self.redis.unlink(self.keys.seen_ever)
        drop_request_filters(self.redis, self.keys, [EVERY_BATCH])

    @translated
    def push(self, batch_id: int, tasks: Sequence[dict], id_field: str) -> None:
        if not tasks:
            return
        keys = [task_key(row[id_field]) for row in tasks]
        payloads = [encode_task(key, batch_id, row[id_field], row) for key, row in zip(keys, tasks)]
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.sadd(self.keys.queued, *keys)
            pipe.rpush(self.keys.pending, *payloads)
            pipe.execute()

    @translated
    def count_attempts(self, task_ids: Sequence) -> list:
        if not task_ids:
            return []
        return self._count_attempts(keys=[self.keys.attempts], args=[task_key(task_id) for task_id in task_ids])

    @translated
    def forget_attempts(self, task_ids: Sequence) -> None:
        if task_ids:
            self.redis.hdel(self.keys.attempts, *[task_key(task_id) for task_id in task_ids])

    @translated
    def pending_count(self) -> int:
        return self.redis.llen(self.keys.pending)

    @translated
    def leased_count(self) -> int:
        return self.redis.zcard(self.keys.leases)

    @translated
    def queue_counts(self) -> tuple:
        with self.redis.pipeline(transaction=True) as pipe:
            pending, leased = pipe.llen(self.keys.pending).zcard(self.keys.leases).execute()
        return pending, leased

    def lease(self, token: str, lease_seconds: float) -> Optional[Lease]:
        return next(iter(self.lease_many([token], lease_seconds)), None)

    @translated
    def lease_many(self, tokens: Sequence[str], lease_seconds: float) -> list:
        *payloads, left = self._lease(keys=[self.keys.pending, self.keys.queued, self.keys.leases,
                                            self.keys.lease_owner, self.keys.paused, self.keys.lease_since],
                                      args=[int(lease_seconds * 1000), *tokens])
        return [Lease.of_payload(decode_task(payload), token, left + len(payloads) - 1 - n)
                for n, (payload, token) in enumerate(zip(payloads, tokens))]

    @translated
    def renew(self, leases: Iterable[Lease], lease_seconds: float) -> list:
        leases = list(leases)
        if not leases:
            return []
        args: list[Union[int, str]] = [int(lease_seconds * 1000)]
        for lease in leases:
            args += [lease.key, lease.token]
        return _kept(leases, self._renew(keys=[self.keys.leases, self.keys.lease_owner], args=args))

    @translated
    def release(self, leases: Sequence[Lease]) -> list:
        if not leases:
            return []
        args = [part for lease in leases for part in (lease.key, lease.token)]
        return _kept(leases, self._release(keys=[self.keys.leases, self.keys.lease_owner, self.keys.lease_since],
                                           args=args))

    @translated
    def hand_back(self, leases: Sequence[Lease]) -> list:
        if not leases:
            return []
        args = [part for lease in leases
                for part in (lease.key, lease.token, encode_task(lease.key, lease.batch_id, lease.task_id, lease.task))]
        return _kept(leases, self._release(keys=[self.keys.leases, self.keys.lease_owner, self.keys.lease_since,
                                                 self.keys.pending, self.keys.queued], args=args))

    @translated
    def give_back(self, leases: Sequence[Lease]) -> int:
        if not leases:
            return 0
        args = [part for lease in leases for part in (lease.key, lease.token)]
        return self._give_back(keys=[self.keys.leases, self.keys.lease_owner], args=args)

    @translated
    def expire_leases_of(self, token_prefix: str) -> int:
        return self._expire_holder(keys=[self.keys.leases, self.keys.lease_owner], args=[token_prefix])

    @translated
    def reclaim_expired(self, limit: int) -> list:
        expired = self._reclaim(keys=[self.keys.leases, self.keys.lease_owner, self.keys.lease_since], args=[limit])
        return [key.decode() for key in expired]

    @translated
    def held_leases(self, oldest: int) -> LeaseView:
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.time().hgetall(self.keys.lease_owner)
            pipe.zrange(self.keys.leases, 0, -1, withscores=True).zrange(self.keys.lease_since, 0, -1, withscores=True)
            (seconds, micros), owners, deadlines, since = pipe.execute()
        taken = {key.decode(): ms / 1000 for key, ms in since}
        rows = [(key.decode(), owners.get(key, b"").decode("utf-8", "replace"), ms / 1000, taken.get(key.decode()))
                for key, ms in deadlines]
        return lease_view(rows, seconds + micros / 1e6, oldest)

    @translated
    def known(self, task_keys: Sequence[str]) -> set:
        if not task_keys:
            return set()
        flags = self._known(keys=[self.keys.queued, self.keys.leases], args=list(task_keys))
        return {key for key, flag in zip(task_keys, flags) if flag}

    @translated
    def forget_if_memory_changed(self) -> bool:
        # A server's run_id is new at every start, and a promoted replica has its own: the marker written by
        # the last patrol names the server that held every write the master has seen. (A server that hides
        # INFO, as some managed services do, is told apart by the marker alone: an empty one.)
        try:
            server = str(self.redis.info("server").get("run_id", "unknown"))
        except redis_response_error():
            server = "unknown"
        if (self.redis.set(self.keys.memory, server, get=True) or b"").decode() == server:
            return False
        self.redis.delete(self.keys.pending, self.keys.queued, self.keys.leases, self.keys.lease_owner,
                          self.keys.lease_since)
        return True

    @translated
    def set_done(self, batch_id: int) -> None:
        self.redis.set(self.keys.done, batch_id)
        drop_request_filters(self.redis, self.keys, [batch_id])    # the batch's requests: not needed any more

    @translated
    def is_done(self) -> bool:
        return bool(self.redis.exists(self.keys.done))

    @translated
    def set_paused(self, since: Optional[float]) -> None:
        if since is None:
            self.redis.delete(self.keys.paused)
        else:
            self.redis.set(self.keys.paused, repr(since))

    @translated
    def paused_since(self) -> Optional[float]:
        since = self.redis.get(self.keys.paused)
        return float(since) if since is not None else None

    @translated
    def ask_open_batch(self, force: bool, reparse: Optional[str] = None) -> None:
        self.redis.set(self.keys.open_request, reparse or ("force" if force else "now"))

    @translated
    def take_open_request(self) -> Optional[str]:
        with self.redis.pipeline(transaction=True) as pipe:     # GETDEL, on servers older than Redis 6.2 too
            request, _ = pipe.get(self.keys.open_request).delete(self.keys.open_request).execute()
        return request.decode() if isinstance(request, bytes) else request


def _kept(leases: Sequence[Lease], lost: list) -> list:
    """The leases a renew / release script found still ours: it answers the positions (from 1) of the others,
    so that the usual answer, every lease kept, is an empty list."""
    if not lost:
        return list(leases)
    gone = set(lost)
    return [lease for n, lease in enumerate(leases, 1) if n not in gone]
