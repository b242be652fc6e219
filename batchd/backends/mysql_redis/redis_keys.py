"""The Redis key layout of a namespace: every key batchd keeps, built only by `Keys`.

Every key is `<ns>:<name>` (`NAMESPACE`, the task table's name by default). docs/architecture.md (The
Redis key schema) has the same keys in a table, for operators; tests/backends/mysql_redis/test_redis_keys.py holds the three
(this list, `Keys`, that table) to the same names. A contract name is fixed: other tools read it. A new
batch forgets the keys marked ✱ (`Keys.batch_keys`). The .lua files named are in lua/.

    batch_pending ✱      LIST of JSON task payloads {"key", "batch", "id", "task"}; no TTL; contract name
        written: the master's push (RPUSH); lease_tasks.lua (LRANGE, LTRIM), release_leases.lua (a hand-back: RPUSH)
        read: workers; the master (its length, to refill); `batchd status`
    batch_done ✱         STRING, the id of the batch that finished; no TTL; contract name
        written: the master, closing a batch       read: workers with keep_alive=False
    queued ✱             SET of the task keys in batch_pending (to tell waiting from lost); no TTL
        written: push (SADD); lease_tasks.lua (SREM)       read: known_tasks.lua (the master's orphan check)
    leases ✱             ZSET task key -> lease deadline, ms of Redis's own clock (TIME); no TTL
        written: lease_tasks, renew_leases (ZADD XX), release_leases (ZREM), give_back_leases and
                 expire_holder_leases (deadline 0), reclaim_expired_leases (ZREM)
        read: the master; `batchd status`
    lease_owner ✱        HASH task key -> the token of the lease that holds it; no TTL
        written: lease_tasks (HSET); release_leases, reclaim_expired_leases (HDEL)   read: every ownership check
    lease_since ✱        ZSET task key -> when its lease was taken, ms of Redis's clock (a renewal keeps it); no TTL
        written: lease_tasks; release_leases, reclaim_expired_leases (ZREM)   read: `batchd status --why`
    attempts ✱           HASH task key -> claims this batch (BATCH_TASK_MAX_ATTEMPTS); no TTL
        written: count_attempts.lua at the master's claim; `batchd requeue --failed` (HDEL)   read: the master
    master_lock          STRING, the master's owner (host:pid); TTL MASTER_LOCK_TIMEOUT, renewed by the live master
        written and read: masters (SET NX PX, renewed every TTL/3, deleted at stop)
    memory               STRING, the run_id of the Redis server at the master's last patrol; no TTL
        written and read: the master, each patrol (SET ... GET): another run_id rebuilds the queue
    wake ✱               LIST, trimmed to one entry; TTL WAKE_TTL
        written: workers, supervisors (RPUSH, LTRIM, EXPIRE)   read: the master (BLPOP, then DEL)
    seen ✱               SET of <batch id>:<fingerprint> of the requests made; TTL SEEN_TTL, renewed with each add;
                         UNLINKed (freed in Redis's background) when the batch closes and when the next opens
        written and read: workers, with REQUEST_FILTER_ENABLE (REQUEST_FILTER = "exact")
    seen_ever            SET of 0:<fingerprint> of the requests made in any batch (REQUEST_FILTER_ACROSS_BATCHES);
                         TTL SEEN_TTL, renewed with each add; kept when batches close and open
        written and read: workers, with REQUEST_FILTER_ENABLE (REQUEST_FILTER = "exact")
    bloom:<batch>        HASH capacity, error, layout, layers, n<layer> (fingerprints added to it): the batch's
                         Bloom filter (REQUEST_FILTER = "bloom", redis_bloom.py); its layers are the STRING
                         bitmaps bloom:<batch>:<layer>, named by bloom_first_seen.lua (their number grows); TTL
                         SEEN_TTL, renewed every 1,000 adds; UNLINKed when the batch closes, and when the next
                         opens if left over; bloom:0, REQUEST_FILTER_ACROSS_BATCHES's, is kept
        written and read: bloom_first_seen.lua, by workers
    blooms               SET of the ids of the batches with a Bloom filter; no TTL
        written: bloom_first_seen.lua (SADD); dropping a filter (SREM)   read: clear_batch (what is left over)
    store                STRING, the identity of the one store this namespace serves (never a password); no TTL
        written: the first master or worker (SET NX)   read: masters, workers, `batchd check`
    paused               STRING, when `batchd pause` paused the namespace (Unix time); no TTL, kept across batches
        written: `batchd pause` (SET), `batchd resume` (DEL)   read: lease_tasks.lua, the master, `batchd status`
    open_request         STRING "now", "force" or a reparse's opening (JSON); no TTL
        written: `batchd open-batch`   read: the master (GET and DEL in one MULTI)
    tally:<batch>        HASH done, failed: tasks settled; held=1 since it was set (missing: lost); TTL TALLY_TTL
        written: the master (at open and close; restore_tally.lua once if lost); every write-back (HINCRBY)
        read: the master, `batchd status`
    stats:<batch>        HASH counter name -> n (batchd/settle/batch_stats.py); TTL STATS_TTL, renewed by each flush
        written: add_counts.lua, at each worker's flush   read: the master, at close
    stats_flushes:<batch>  HASH worker -> the number of its last flush applied; TTL as stats:
        written and read: add_counts.lua
    hosts:<batch>        HASH host -> JSON {field: n} (hosts/counts.py): HOST_STATS_TOP hosts at most and "(other)";
                         TTL as stats:
        written: add_counts.lua   read: `batchd status --hosts`, /metrics
    host_gauges:<worker>  STRING JSON {host: {waiting, in_flight}}, a worker's busiest hosts now; TTL its flushes
                         renew (3 x STATS_FLUSH_INTERVAL + 10 s); deleted at its stop
        written: the worker's flushes   read: `batchd status --hosts`, /metrics (SCAN, summed)
    rate:<host>          STRING, the host's next theoretical arrival (ms of Redis's clock, DOMAIN_RATE_LIMIT);
                         TTL until that arrival and a second more
        written and read: book_host_rate.lua, by workers
    breaker:<host>       HASH, the host's breaker record (hosts/breakers.py FIELDS); TTL RECORD_TTL (a day),
                         renewed by each step
        written: step_host_breaker.lua; DEL when a probe answers   read: workers (HMGET), `batchd status --hosts`
    breakers             ZSET host -> when its breaker record last changed (Unix s), KEPT_HOSTS at most; no TTL
        written: step_host_breaker.lua; ZREM when a probe answers   read: `batchd status --hosts`, /metrics
    render_choices       HASH host -> JSON, the host's render="auto" choice (hosts/render_choices.py); no TTL, kept
                         across batches; KEPT_HOSTS hosts at most
        written: workers (a sample), the master at a batch's close (a relearn), each step between WATCH and MULTI
        read: workers (HGET, at most every LOOK_EVERY s a host), `batchd quality`, the dashboard
    status:<host>:<seat>  HASH, a supervisor's snapshot (seat: the verb, @NAME for a named instance);
                         TTL max(10 s, 3 x STATUS_INTERVAL) + 1 s
        written: its supervisor, every STATUS_INTERVAL; deleted at exit
        read: `batchd status`; worker-only supervisors (the master's figures)
"""

WAKE_TTL = 60
SEEN_TTL = 40 * 24 * 3600
TALLY_TTL = 400 * 24 * 3600     # longer than any batch: a tally is set when its batch opens
STATS_TTL = TALLY_TTL           # the counters outlive their batch as long: the record has them at its close


def _fixed(name: str) -> property:
    """A key of the namespace whose name never varies, read as an attribute."""
    return property(lambda keys: keys.key(name))


class Keys:
    """The keys of one namespace (the module's docstring says what each holds)."""

    def __init__(self, namespace: str):
        self.ns = namespace

    def key(self, name: str) -> str:
        return f"{self.ns}:{name}"

    pending = _fixed("batch_pending")
    done = _fixed("batch_done")
    queued = _fixed("queued")
    leases = _fixed("leases")
    lease_owner = _fixed("lease_owner")
    lease_since = _fixed("lease_since")
    attempts = _fixed("attempts")
    master_lock = _fixed("master_lock")
    wake = _fixed("wake")
    seen = _fixed("seen")
    seen_ever = _fixed("seen_ever")
    blooms = _fixed("blooms")
    store = _fixed("store")
    memory = _fixed("memory")
    paused = _fixed("paused")
    open_request = _fixed("open_request")
    breakers = _fixed("breakers")
    render_choices = _fixed("render_choices")

    def tally(self, batch_id: int) -> str:
        return self.key(f"tally:{batch_id}")

    def stats(self, batch_id: int) -> str:
        return self.key(f"stats:{batch_id}")

    def stats_flushes(self, batch_id: int) -> str:
        return self.key(f"stats_flushes:{batch_id}")

    def hosts(self, batch_id: int) -> str:
        return self.key(f"hosts:{batch_id}")

    def host_gauges(self, source: str) -> str:
        return self.key(f"host_gauges:{source}")

    def host_gauges_pattern(self) -> str:
        return self.host_gauges("*")

    def rate(self, host: str) -> str:
        return self.key(f"rate:{host}")

    def breaker(self, host: str) -> str:
        return self.key(f"breaker:{host}")

    def bloom(self, batch_id: int) -> str:
        return self.key(f"bloom:{batch_id}")

    def bloom_layer(self, batch_id: int, layer: int) -> str:
        """(bloom_first_seen.lua names the layers alike, from the filter's key.)"""
        return f"{self.bloom(batch_id)}:{layer}"

    def status(self, name: str) -> str:
        """A supervisor's snapshot; `name` is host:seat (the verb, with @NAME for a named instance)."""
        return self.key(f"status:{name}")

    def status_pattern(self) -> str:
        return self.status("*")

    def batch_keys(self) -> list:
        """What a new batch forgets (✱ above)."""
        return [self.pending, self.done, self.queued, self.leases, self.lease_owner, self.lease_since,
                self.attempts, self.wake, self.seen]
