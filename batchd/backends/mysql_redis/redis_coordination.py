"""How the processes of a namespace find each other in Redis: one master (its lock), wake-ups for it, each
supervisor's snapshot, and the one store the namespace serves.

Keys (redis_keys.py): master_lock, wake, status:<host>:<seat>, store.
"""
from typing import Optional

from .redis_keys import WAKE_TTL
from .redis_port import RedisPort, translated


class RedisMasterLock:
    """The MasterLock port: redis-py's lock on master_lock, the master's owner string its token."""

    def __init__(self, client, url: str, name: str, owner: str, ttl: float):
        # thread_local=False: the lock is renewed from another thread than the one that took it,
        # and redis-py's default thread-local token (4.3.4) would make that renewal fail.
        self._lock = client.lock(name, timeout=ttl, blocking=False, thread_local=False)
        self._owner, self.url = owner, url

    @translated
    def acquire(self) -> bool:
        return bool(self._lock.acquire(blocking=False, token=self._owner))

    @translated
    def renew(self) -> bool:
        import redis
        try:
            return bool(self._lock.reacquire())
        except redis.exceptions.LockError:
            return False

    @translated
    def release(self) -> None:
        import redis
        try:
            self._lock.release()
        except redis.exceptions.LockError:
            pass


class RedisMasterLocks(RedisPort):
    """The MasterLocks port: master_lock."""

    @translated
    def master_lock(self, owner: str, ttl: float) -> RedisMasterLock:
        return RedisMasterLock(self.redis, self.url, self.keys.master_lock, owner, ttl)

    @translated
    def lock_holder(self) -> Optional[str]:
        holder = self.redis.get(self.keys.master_lock)
        return holder.decode() if holder else None


class RedisWake(RedisPort):
    """The WakeChannel port: a list the master BLPOPs on."""

    @translated
    def wake_master(self) -> None:
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.rpush(self.keys.wake, 1)
            pipe.ltrim(self.keys.wake, 0, 0)
            pipe.expire(self.keys.wake, WAKE_TTL)
            pipe.execute()

    @translated
    def wait_for_wake(self, timeout: float) -> bool:
        # Redis >= 6 takes a fractional timeout; 0 would mean "for ever".
        woken = self.redis.blpop([self.keys.wake], timeout=max(0.01, round(timeout, 2)))
        if woken:
            self.redis.delete(self.keys.wake)
        return bool(woken)


class RedisStatusBoard(RedisPort):
    """The StatusBoard port: a hash per supervisor, with a TTL."""

    @translated
    def write_status(self, key: str, fields: dict, ttl: float) -> None:
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(self.keys.status(key))
            pipe.hset(self.keys.status(key), mapping=fields)
            pipe.pexpire(self.keys.status(key), max(1, int(ttl * 1000)))
            pipe.execute()

    @translated
    def read_statuses(self) -> list:
        statuses = []
        for key in self.redis.scan_iter(match=self.keys.status_pattern(), count=100):
            fields = self.redis.hgetall(key)
            if fields:
                statuses.append({k.decode(): v.decode() for k, v in fields.items()})
        return statuses

    @translated
    def delete_status(self, key: str) -> None:
        self.redis.delete(self.keys.status(key))


class RedisNamespaceRecord(RedisPort):
    """The NamespaceRecord port: the store key."""

    @translated
    def claim_namespace(self, identity: str, record: bool = True) -> Optional[str]:
        if record:
            self.redis.set(self.keys.store, identity, nx=True)
        recorded = self.redis.get(self.keys.store)
        return None if recorded is None or recorded.decode() == identity else recorded.decode()
