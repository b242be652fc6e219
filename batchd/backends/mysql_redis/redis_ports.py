"""The Redis ports: the queue side shared by the master and the workers on any number of hosts.

The key schema, all under `<ns>:` (built only by `Keys`):

    <ns>:batch_pending   LIST    JSON payloads of claimed tasks waiting for a worker (contract name)
    <ns>:batch_done      STRING  the batch-done flag: the id of the batch that finished (contract name)
    <ns>:queued          SET     keys of the tasks in batch_pending (to tell waiting from lost)
    <ns>:leases          ZSET    key -> lease deadline, in ms of Redis's own clock (TIME)
    <ns>:lease_owner     HASH    key -> token of the lease that holds it
    <ns>:lease_since     ZSET    key -> when its lease was taken, in ms of Redis's clock (renewals keep it)
    <ns>:attempts        HASH    key -> leases this batch (BATCH_TASK_MAX_ATTEMPTS)
    <ns>:master_lock     STRING  the master's owner string, with a TTL the live master renews
    <ns>:wake            LIST    wake-ups for the master, trimmed to one entry, with a TTL
    <ns>:seen            SET     <batch id>:<fingerprint> of the requests made (REQUEST_FILTER_ENABLE), with a TTL
    <ns>:tally:<batch>   HASH    done, failed: tasks settled in the batch, added by each write-back;
                                 held=1 since it was set (missing: lost with Redis), with a TTL
    <ns>:stats:<batch>   HASH    counter name -> n: the batch's counters (batchd/settle/batch_stats.py), added by every
                                 worker's flushes, with a TTL
    <ns>:stats_flushes:<batch>  HASH  worker -> the number of its last flush applied to the batch, with a TTL
    <ns>:breaker:<host>  HASH    the host's breaker record (hosts/breakers.py FIELDS), with a TTL
    <ns>:breakers        ZSET    host -> when its breaker record last changed (for display), trimmed

    <ns>:hosts:<batch>   HASH    host -> JSON {field: n}: the batch's counters per host (hosts/counts.py),
                                 HOST_STATS_TOP hosts at most and "(other)", added by the same flushes, with a TTL
    <ns>:host_gauges:<worker>  STRING  JSON {host: {waiting, in_flight}}: a worker's busiest hosts now, with a
                                 TTL its flushes renew
    <ns>:store           STRING  the identity of the one store this namespace serves (server, database,
                                 task table; never a password), recorded by the first master or worker
    <ns>:memory          STRING  the run_id of the Redis server that held the queue at the master's last
                                 patrol: another one (a restart, a failover) may have lost writes
    <ns>:status:<host>:<seat>      HASH  a supervisor's snapshot for `batchd status`, with a TTL

A contract name is fixed: other tools read it (docs/architecture.md, Names). That document also
gives each key's TTL and who writes and reads it.

Every step that must not be split (pop + lease, check owner + renew / release,
find expired + remove) is one Lua script, so it is atomic on the server.
"""
import functools
import json
import re
from typing import Any, Iterable, Optional, Sequence, Union

from ...config import redact_url
from ...errors import BackendUnavailable, ConfigError
from ...service.threads import guard
from ...codec import decode_task, encode_task
from ...hosts.breakers import FIELDS as BREAKER_FIELDS, KEPT_HOSTS, RECORD_TTL, STEPS as BREAKER_STEPS, state_of
from ...model import Lease, task_key
from ...hosts.counts import OTHER, sum_gauges
from ..ports import LeaseView, lease_view
from .redis_client import sentinels_said, serving

WAKE_TTL = 60
SEEN_TTL = 40 * 24 * 3600
TALLY_TTL = 400 * 24 * 3600     # longer than any batch: a tally is set when its batch opens
STATS_TTL = TALLY_TTL           # the counters outlive their batch as long: the record has them at its close

# A worker's flush of a batch's counters, applied once. KEYS: the counters, the flush numbers, the table of hosts.
# ARGV: the worker, the flush's number, the ttl s, the hosts' counts (JSON {host: {field: n}}), the cap on the
# hosts kept, the name of the others' entry, then name, n pairs. Returns 1 when applied, 0 when it was already.
# A host the table has is added to; a new one beyond the cap goes to the others' entry (host_counts.py).
ADD_COUNTS_SCRIPT = """
local last = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if tonumber(ARGV[2]) <= last then
  return 0
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
for i = 7, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
end
local cap, other = tonumber(ARGV[5]), ARGV[6]
for host, fields in pairs(cjson.decode(ARGV[4])) do
  if redis.call('HEXISTS', KEYS[3], host) == 0 then
    local held = redis.call('HLEN', KEYS[3]) - redis.call('HEXISTS', KEYS[3], other)
    if host == other or held >= cap then
      host = other
    end
  end
  local kept = redis.call('HGET', KEYS[3], host)
  local counts = kept and cjson.decode(kept) or {}
  for field, n in pairs(fields) do
    counts[field] = (counts[field] or 0) + n
  end
  redis.call('HSET', KEYS[3], host, cjson.encode(counts))
end
for i = 1, 3 do
  redis.call('EXPIRE', KEYS[i], ARGV[3])
end
return 1
"""

# Restore a tally lost with Redis, unless held. ARGV: done, failed, ttl s.
RESTORE_TALLY_SCRIPT = """
if redis.call('HEXISTS', KEYS[1], 'held') == 0 then
  redis.call('HINCRBY', KEYS[1], 'done', ARGV[1])
  redis.call('HINCRBY', KEYS[1], 'failed', ARGV[2])
  redis.call('HSET', KEYS[1], 'held', 1)
  redis.call('EXPIRE', KEYS[1], ARGV[3])
end
return 0
"""

# ARGV: lease ms, then one token per task wanted. Returns the payloads taken (in list order), then the
# list's length left. A paused namespace (KEYS[5] set) has nothing to take. KEYS[6]: lease_since.
LEASE_SCRIPT = """
if redis.replicate_commands then redis.replicate_commands() end
if redis.call('EXISTS', KEYS[5]) == 1 then return {redis.call('LLEN', KEYS[1])} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline = now + tonumber(ARGV[1])
local taken = {}
for i = 2, #ARGV do
  local payload = redis.call('LPOP', KEYS[1])
  if not payload then break end
  local key = cjson.decode(payload)['key']
  redis.call('SREM', KEYS[2], key)
  redis.call('ZADD', KEYS[3], deadline, key)
  redis.call('HSET', KEYS[4], key, ARGV[i])
  redis.call('ZADD', KEYS[6], now, key)
  taken[#taken + 1] = payload
end
taken[#taken + 1] = redis.call('LLEN', KEYS[1])
return taken
"""

# ARGV: lease ms, then key, token pairs. Returns 1 / 0 per pair: renewed, or no longer ours.
RENEW_SCRIPT = """
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local deadline = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV, 2 do
  if redis.call('HGET', KEYS[2], ARGV[i]) == ARGV[i + 1] then
    redis.call('ZADD', KEYS[1], 'XX', deadline, ARGV[i])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
"""

# KEYS: leases, lease_owner, lease_since, and to hand back, pending and queued. ARGV: key, token pairs to
# release, or key, token, payload triples to hand back (the task back at the queue's tail). Returns 1 / 0 per
# entry: done, or the lease no longer ours (left alone).
RELEASE_SCRIPT = """
local stride = #KEYS == 5 and 3 or 2
local out = {}
for i = 1, #ARGV, stride do
  if redis.call('HGET', KEYS[2], ARGV[i]) == ARGV[i + 1] then
    redis.call('HDEL', KEYS[2], ARGV[i])
    redis.call('ZREM', KEYS[1], ARGV[i])
    redis.call('ZREM', KEYS[3], ARGV[i])
    if stride == 3 then
      redis.call('SADD', KEYS[5], ARGV[i])
      redis.call('RPUSH', KEYS[4], ARGV[i + 2])
    end
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
"""

# ARGV: key, token pairs. Returns how many leases were still owned, now due at once (deadline 0).
GIVE_BACK_SCRIPT = """
local given = 0
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[2], ARGV[i]) == ARGV[i + 1] then
    redis.call('ZADD', KEYS[1], 'XX', 0, ARGV[i])
    given = given + 1
  end
end
return given
"""

# ARGV: a token prefix (host:pid:). Returns how many leases held under it are now due at once.
EXPIRE_HOLDER_SCRIPT = """
local owners = redis.call('HGETALL', KEYS[2])
local prefix, given = ARGV[1], 0
for i = 1, #owners, 2 do
  if string.sub(owners[i + 1], 1, #prefix) == prefix then
    redis.call('ZADD', KEYS[1], 'XX', 0, owners[i])
    given = given + 1
  end
end
return given
"""

# KEYS: leases, lease_owner, lease_since. ARGV: limit. Returns the keys whose lease expired, removed.
RECLAIM_SCRIPT = """
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
for _, key in ipairs(expired) do
  redis.call('ZREM', KEYS[1], key)
  redis.call('HDEL', KEYS[2], key)
  redis.call('ZREM', KEYS[3], key)
end
return expired
"""

# ARGV: keys. Returns 1 / 0 per key: queued or leased, or unknown.
KNOWN_SCRIPT = """
local out = {}
for i = 1, #ARGV do
  if redis.call('SISMEMBER', KEYS[1], ARGV[i]) == 1 or redis.call('ZSCORE', KEYS[2], ARGV[i]) then
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
"""

# ARGV: task keys. Returns each one's attempts in this batch, this one counted. One script rather than a
# pipeline of HINCRBYs: the master packs one command of N arguments instead of N commands.
COUNT_ATTEMPTS_SCRIPT = """
local out = {}
for i = 1, #ARGV do
  out[i] = redis.call('HINCRBY', KEYS[1], ARGV[i], 1)
end
return out
"""

# DOMAIN_RATE_LIMIT for every worker: host_rates.booked_start() on the host's key. KEYS[1]: the host's
# next theoretical arrival (ms); ARGV: the interval and the burst's credit (ms). Returns the wait in ms.
RATE_SCRIPT = """
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local theoretical = math.max(tonumber(redis.call('GET', KEYS[1]) or now), now)
local start = math.max(now, theoretical - tonumber(ARGV[2]))
local next_arrival = theoretical + tonumber(ARGV[1])
redis.call('SET', KEYS[1], tostring(next_arrival), 'PX', math.ceil(next_arrival - now) + 1000)
return tostring(start - now)
"""


# One step of a host's breaker: host_breakers.breaker_step() on the host's hash. KEYS: the hash, the index.
# ARGV: the step, now (s), its arguments. Returns the answer, then the record's FIELDS (none: no record).
BREAKER_SCRIPT = """
local step, now = ARGV[1], tonumber(ARGV[2])
local f = redis.call('HGETALL', KEYS[1])
local r = {phase = 'closed', since = 0, failures = 0, wait = 0, next_probe = 0, probe_until = 0, not_before = 0,
           down = 0, said = ''}
local had = #f > 0
for i = 1, #f, 2 do r[f[i]] = f[i + 1] end
for _, k in ipairs({'since', 'failures', 'wait', 'next_probe', 'probe_until', 'not_before', 'down'}) do
  r[k] = tonumber(r[k])
end
local answer = 0
if step == 'hold_off' then
  r.not_before = math.max(r.not_before, tonumber(ARGV[3]))
elseif step == 'trip' then
  if r.phase == 'closed' then
    r.phase, r.since, r.failures = 'open', now, tonumber(ARGV[3])
    r.wait = tonumber(ARGV[4])
    r.next_probe = now + r.wait
    answer = 1
  else
    r.failures = r.failures + tonumber(ARGV[3])
  end
elseif r.phase == 'closed' then
  if not had then return {0} end
  local out = {0}
  for _, k in ipairs(FIELDS) do out[#out + 1] = tostring(r[k]) end
  return out
elseif step == 'claim' then
  if math.max(r.next_probe, r.not_before) <= now and not (r.phase == 'probing' and r.probe_until > now) then
    r.phase, r.probe_until = 'probing', now + tonumber(ARGV[3])
    answer = 1
  end
elseif step == 'probe_failed' then
  r.wait = math.min(r.wait * 2, tonumber(ARGV[3]))
  r.phase, r.failures, r.next_probe, r.probe_until = 'open', r.failures + 1, now + r.wait, 0
elseif step == 'release' then
  if r.phase == 'probing' then r.phase, r.probe_until = 'open', 0 end
elseif step == 'say_down' then
  if r.said ~= ARGV[3] then answer = 1 end
  r.down, r.said = 1, ARGV[3]
end
local out, flat = {answer}, {}
for _, k in ipairs(FIELDS) do
  local v = k == 'phase' and r[k] or (k == 'said' and r[k] or string.format('%.17g', r[k]))
  out[#out + 1] = v
  flat[#flat + 1] = k
  flat[#flat + 1] = v
end
redis.call('HSET', KEYS[1], unpack(flat))
redis.call('EXPIRE', KEYS[1], ARGV[#ARGV - 1])
redis.call('ZADD', KEYS[2], now, ARGV[#ARGV])
if redis.call('ZCARD', KEYS[2]) > tonumber(ARGV[#ARGV - 2]) then
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, 0)
end
return out
"""

class Keys:
    def __init__(self, namespace: str):
        self.ns = namespace

    def _key(self, name: str) -> str:
        return f"{self.ns}:{name}"

    pending = property(lambda self: self._key("batch_pending"))
    done = property(lambda self: self._key("batch_done"))
    queued = property(lambda self: self._key("queued"))
    leases = property(lambda self: self._key("leases"))
    lease_owner = property(lambda self: self._key("lease_owner"))
    lease_since = property(lambda self: self._key("lease_since"))
    attempts = property(lambda self: self._key("attempts"))
    master_lock = property(lambda self: self._key("master_lock"))
    wake = property(lambda self: self._key("wake"))
    seen = property(lambda self: self._key("seen"))
    store = property(lambda self: self._key("store"))
    memory = property(lambda self: self._key("memory"))
    paused = property(lambda self: self._key("paused"))              # when (Unix time); kept across batches
    open_request = property(lambda self: self._key("open_request"))  # "now" or "force", for the master

    def tally(self, batch_id: int) -> str:
        return self._key(f"tally:{batch_id}")

    def stats(self, batch_id: int) -> str:
        return self._key(f"stats:{batch_id}")

    def stats_flushes(self, batch_id: int) -> str:
        return self._key(f"stats_flushes:{batch_id}")

    def hosts(self, batch_id: int) -> str:
        return self._key(f"hosts:{batch_id}")

    def host_gauges(self, source: str) -> str:
        return self._key(f"host_gauges:{source}")

    def rate(self, host: str) -> str:
        return self._key(f"rate:{host}")

    def breaker(self, host: str) -> str:
        return self._key(f"breaker:{host}")

    breakers = property(lambda self: self._key("breakers"))

    def status(self, name: str) -> str:
        """A supervisor's snapshot; `name` is host:seat (the verb, with @NAME for a named instance)."""
        return self._key(f"status:{name}")

    def status_pattern(self) -> str:
        return self._key("status:*")

    def batch_keys(self) -> list:
        """What a new batch forgets."""
        return [self.pending, self.done, self.queued, self.leases, self.lease_owner, self.lease_since,
                self.attempts, self.wake, self.seen]


# Replies that mean "not now" (a replica promoted, a full memory, a busy script) rather than "wrong".
TRANSIENT_REPLIES = ("OOM", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "BUSY", "LOADING")
# Replies that waiting cannot mend: the URL's password, user or database number (exit 78).
# (redis-py strips a leading "ERR " from some replies.)
REFUSAL_REPLIES = ("NOAUTH", "WRONGPASS", "NOPERM", "invalid password", "invalid username-password",
                   "invalid DB index", "DB index is out of range", "ERR invalid DB index", "ERR DB index",
                   "AUTH <password> called without", "ERR AUTH <password> called without")
CALL_BOUND = 40.0     # the longest a call can block: connect timeout + socket timeout, with a margin


IN_A_PIPELINE = re.compile(r"^Command # \d+ \(.*?\) of pipeline caused error: ")


def transient_classes(errors) -> tuple:
    """The reply classes redis-py strips the TRANSIENT_REPLIES prefix from (which classes depends on its
    version: 8 has OutOfMemoryError, 4.3 leaves "OOM ..." a ResponseError)."""
    return tuple(getattr(errors, name) for name in ("ReadOnlyError", "OutOfMemoryError", "BusyLoadingError",
                                                   "MasterDownError", "TryAgainError", "ClusterDownError")
                 if hasattr(errors, name))


def redis_response_error():
    import redis.exceptions
    return redis.exceptions.ResponseError


def translate_redis_error(error, url: str) -> Exception:
    """The batchd error a Redis failure stands for: BackendUnavailable (wait it out), ConfigError (the
    operator must fix REDIS_URL), or the error itself (a bug: it reaches the thread guard)."""
    import redis.exceptions as errors
    from redis.sentinel import MasterNotFoundError
    text = IN_A_PIPELINE.sub("", str(error))       # the reply, not where in a MULTI it came (redis-py 4)
    if isinstance(error, MasterNotFoundError):     # its text holds every Sentinel's client, repr'd: not for a log
        return sentinels_said(error, url)
    if isinstance(error, (errors.AuthenticationError, errors.AuthorizationError)) or text.startswith(REFUSAL_REPLIES):
        return ConfigError(f"setting REDIS_URL: Redis {redact_url(url)} refused us: {text}")
    if isinstance(error, (errors.ConnectionError, errors.TimeoutError, *transient_classes(errors))) \
            or text.startswith(TRANSIENT_REPLIES):
        return BackendUnavailable(f"Redis {redact_url(url)} unreachable: {text}", "Redis")
    return error


def translated(method):
    """Every Redis call: connection failures leave as BackendUnavailable, refusals of the URL's credentials
    as ConfigError; the calling thread promises to be back within the client's timeouts."""
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        import redis
        try:
            with guard.waiting(CALL_BOUND):
                return method(self, *args, **kwargs)
        except redis.RedisError as e:
            translated_error = translate_redis_error(e, self.url)
            if translated_error is e:
                raise
            raise translated_error from None
    return call


class RedisMasterLock:
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


class LuaScript:
    """A Lua script of a port, as a class attribute: each port gets it registered with its own client
    (redis-py's Script: EVALSHA, loading the script on the server the first time it is missing)."""

    def __init__(self, source: str):
        self.source = source
        self.attribute = ""

    def __set_name__(self, owner, name: str) -> None:
        self.attribute = f"_registered{name}"

    def __get__(self, port, owner=None) -> Any:
        if port is None:
            return self
        registered = port.__dict__.get(self.attribute)
        if registered is None:
            registered = port.__dict__[self.attribute] = port.redis.register_script(self.source)
        return registered


class RedisPort:
    """What the ports of one namespace share: one client (one connection pool per process), the URL for
    messages (never the password), the key schema."""

    def __init__(self, url: str, namespace: str, client):
        self.url, self.namespace, self.keys, self.redis = url, namespace, Keys(namespace), client

    def close(self) -> None:
        self.redis.close()


class RedisLeaseQueue(RedisPort):
    """The LeaseQueue port: batch_pending, queued, leases, lease_owner, attempts, batch_done."""

    backend_name = "Redis"
    _lease = LuaScript(LEASE_SCRIPT)
    _renew = LuaScript(RENEW_SCRIPT)
    _release = LuaScript(RELEASE_SCRIPT)
    _reclaim = LuaScript(RECLAIM_SCRIPT)
    _known = LuaScript(KNOWN_SCRIPT)
    _give_back = LuaScript(GIVE_BACK_SCRIPT)
    _expire_holder = LuaScript(EXPIRE_HOLDER_SCRIPT)
    _count_attempts = LuaScript(COUNT_ATTEMPTS_SCRIPT)

    def describe(self) -> str:
        """The URL (password redacted) and, under Sentinel, the primary it found and its replicas."""
        under_sentinel = serving(self.redis)
        return f"Redis {redact_url(self.url)}" + (f": {under_sentinel}" if under_sentinel else "")

    @translated
    def ping(self) -> None:
        self.redis.ping()

    @translated
    def clear_batch(self) -> None:
        self.redis.delete(*self.keys.batch_keys())

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
        flags = self._renew(keys=[self.keys.leases, self.keys.lease_owner], args=args)
        return [lease for lease, flag in zip(leases, flags) if flag]

    @translated
    def release(self, leases: Sequence[Lease]) -> list:
        if not leases:
            return []
        args = [part for lease in leases for part in (lease.key, lease.token)]
        flags = self._release(keys=[self.keys.leases, self.keys.lease_owner, self.keys.lease_since], args=args)
        return [lease for lease, flag in zip(leases, flags) if flag]

    @translated
    def hand_back(self, leases: Sequence[Lease]) -> list:
        if not leases:
            return []
        args = [part for lease in leases
                for part in (lease.key, lease.token, encode_task(lease.key, lease.batch_id, lease.task_id, lease.task))]
        flags = self._release(keys=[self.keys.leases, self.keys.lease_owner, self.keys.lease_since,
                                    self.keys.pending, self.keys.queued], args=args)
        return [lease for lease, flag in zip(leases, flags) if flag]

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
    def ask_open_batch(self, force: bool) -> None:
        self.redis.set(self.keys.open_request, "force" if force else "now")

    @translated
    def take_open_request(self) -> Optional[str]:
        with self.redis.pipeline(transaction=True) as pipe:     # GETDEL, on servers older than Redis 6.2 too
            request, _ = pipe.get(self.keys.open_request).delete(self.keys.open_request).execute()
        return request.decode() if isinstance(request, bytes) else request


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


class RedisSeenFilter(RedisPort):
    """The SeenFilter port: a set of fingerprints, with a TTL."""

    @translated
    def first_seen(self, batch_id: int, fingerprint: str) -> bool:
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.sadd(self.keys.seen, f"{batch_id}:{fingerprint}")
            pipe.expire(self.keys.seen, SEEN_TTL)
            added, _ = pipe.execute()
        return bool(added)


class RedisHostRates(RedisPort):
    """The HostRates port: one key per host, its next theoretical arrival."""

    _book = LuaScript(RATE_SCRIPT)

    @translated
    def reserve(self, host: str, per_second: float, burst: int) -> float:
        interval_ms = 1000.0 / per_second
        waited_ms = self._book(keys=[self.keys.rate(host)], args=[interval_ms, (burst - 1) * interval_ms])
        return max(0.0, float(waited_ms) / 1000)


class RedisHostBreakers(RedisPort):
    """The HostBreakers port: a hash per host with a breaker record, an index of them for display."""

    _step = LuaScript("local FIELDS = {'" + "', '".join(BREAKER_FIELDS) + "'}\n" + BREAKER_SCRIPT)

    @translated
    def step(self, host: str, step: str, now: float, arg=None) -> tuple:
        if step not in BREAKER_STEPS:
            raise ValueError(f"no breaker step {step!r}")
        args = [step, repr(now)] + [repr(a) if isinstance(a, float) else a for a in
                                    (arg if isinstance(arg, tuple) else () if arg is None else (arg,))]
        reply = self._step(keys=[self.keys.breaker(host), self.keys.breakers],
                           args=args + [KEPT_HOSTS, int(RECORD_TTL), host])
        return _breaker_state(reply[1:]), int(reply[0])

    @translated
    def look(self, host: str):
        return _breaker_state(self.redis.hmget(self.keys.breaker(host), *BREAKER_FIELDS))

    @translated
    def close(self, host: str) -> None:
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.delete(self.keys.breaker(host))
            pipe.zrem(self.keys.breakers, host)
            pipe.execute()

    @translated
    def states(self, limit: int = 20) -> dict:
        hosts = [host.decode() for host in self.redis.zrevrange(self.keys.breakers, 0, max(0, limit - 1))]
        with self.redis.pipeline(transaction=False) as pipe:
            for host in hosts:
                pipe.hmget(self.keys.breaker(host), *BREAKER_FIELDS)
            records = pipe.execute()
        shown = {host: _breaker_state(record) for host, record in zip(hosts, records)}
        return {host: state for host, state in shown.items() if state is not None}     # (expired records)


def _breaker_state(values):
    """The BreakerState of a record's FIELDS as Redis gave them (all None or none: no record)."""
    if not values or values[0] is None:
        return None
    return state_of({name: (v.decode() if isinstance(v, bytes) else v) for name, v in zip(BREAKER_FIELDS, values)})

class RedisTally(RedisPort):
    """The BatchTally port: one hash per batch."""

    _restore = LuaScript(RESTORE_TALLY_SCRIPT)

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

    _add = LuaScript(ADD_COUNTS_SCRIPT)

    @translated
    def add_counts(self, batch_id: int, counts, source: str, seq: int, hosts={}, host_cap: int = 0) -> None:
        pairs = [part for name, n in counts.items() for part in (name, int(n))]
        self._add(keys=[self.keys.stats(batch_id), self.keys.stats_flushes(batch_id), self.keys.hosts(batch_id)],
                  args=[source, seq, STATS_TTL, json.dumps(hosts), host_cap, OTHER] + pairs)

    @translated
    def counts(self, batch_id: int) -> dict:
        return {name.decode(): int(n) for name, n in self.redis.hgetall(self.keys.stats(batch_id)).items()}

    @translated
    def host_counts(self, batch_id: int) -> dict:
        return {host.decode(): json.loads(counts) for host, counts in self.redis.hgetall(self.keys.hosts(batch_id)).items()}

    @translated
    def set_host_gauges(self, source: str, gauges, ttl: float) -> None:
        if gauges:
            self.redis.set(self.keys.host_gauges(source), json.dumps(gauges), px=max(1, int(ttl * 1000)))
        else:
            self.redis.delete(self.keys.host_gauges(source))

    @translated
    def host_gauges(self) -> dict:
        keys = list(self.redis.scan_iter(match=self.keys.host_gauges("*"), count=100))
        return sum_gauges(json.loads(value) for value in (self.redis.mget(keys) if keys else ()) if value is not None)


class RedisNamespaceRecord(RedisPort):
    """The NamespaceRecord port: the store key."""

    @translated
    def claim_namespace(self, identity: str, record: bool = True) -> Optional[str]:
        if record:
            self.redis.set(self.keys.store, identity, nx=True)
        recorded = self.redis.get(self.keys.store)
        return None if recorded is None or recorded.decode() == identity else recorded.decode()
