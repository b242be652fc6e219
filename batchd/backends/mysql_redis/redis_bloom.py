"""REQUEST_FILTER = "bloom": a batch's requests in a scalable Bloom filter of Redis bitmaps, and the dropping of a
batch's filter (either kind) without blocking Redis.

A fingerprint costs about 2 bytes of Redis rather than the exact set's 85, at the price of a few new requests taken
for ones already made (REQUEST_FILTER_ERROR_RATE of them at most): those are not made. lua/bloom_first_seen.lua
tests and adds a fingerprint in one step, so a request that passes the filter costs one round trip, as the exact
filter's SADD does; its layers, their sizes and hashes are told there.

Keys (redis_keys.py): bloom:<batch> (the filter's HASH) and its bitmaps bloom:<batch>:<layer>, blooms (the batches
with a filter). A batch's filter is dropped when it closes (the master's set_done), and any left over when the
next opens (clear_batch); UNLINK frees them in Redis's background thread, so a filter of 100 M fingerprints
(200 MB) or an exact set of as many (8 GB) never stalls the Redis everything else shares.
"""
import hashlib

from .lua_scripts import LuaScript
from .redis_keys import SEEN_TTL, Keys
from .redis_port import RedisPort, translated

HASH_BITS = 48      # each of the two hashes: h1 + j x h2 stays exact in Lua's doubles for every k


def fingerprint_hashes(fingerprint: str) -> tuple:
    """The two hashes the filter's double hashing takes, from the fingerprint's own digest (Request.fingerprint:
    sha1 hex); h2 odd, so that its multiples never fall on one bit."""
    try:
        digest = bytes.fromhex(fingerprint)
    except ValueError:
        digest = b""
    if len(digest) * 8 < 2 * HASH_BITS:          # not a digest of ours: hashed
        digest = hashlib.sha1(fingerprint.encode()).digest()
    size = HASH_BITS // 8
    return int.from_bytes(digest[:size], "big"), int.from_bytes(digest[size:2 * size], "big") | 1


class RedisBloomFilter(RedisPort):
    """The SeenFilter port for REQUEST_FILTER = "bloom": one scalable Bloom filter per batch."""

    _first_seen = LuaScript("bloom_first_seen")

    def __init__(self, url: str, namespace: str, client, capacity: int, error_rate: float):
        super().__init__(url, namespace, client)
        self.capacity, self.error_rate = capacity, error_rate

    def first_seen(self, batch_id: int, fingerprint: str) -> bool:
        return self.first_seen_many(batch_id, [fingerprint])[0]

    @translated
    def first_seen_many(self, batch_id: int, fingerprints) -> list:
        """first_seen of each fingerprint in turn, in one call (the worker asks one at a time; the bench fills)."""
        hashes = [part for fingerprint in fingerprints for part in fingerprint_hashes(fingerprint)]
        answers = self._first_seen(keys=[self.keys.bloom(batch_id), self.keys.blooms],
                                   args=[self.capacity, repr(self.error_rate), SEEN_TTL, batch_id] + hashes)
        return [bool(answer) for answer in answers]


def drop_request_filters(redis, keys: Keys, batch_ids=None) -> None:
    """UNLINK the exact filter's set and the bloom filters of `batch_ids` (None: every batch's): Redis frees
    them in its background thread. (Not a MULTI: a filter half dropped is dropped again next time.)"""
    if batch_ids is None:
        batch_ids = [int(batch_id) for batch_id in redis.smembers(keys.blooms)]
    doomed = [keys.seen]
    for batch_id in batch_ids:
        layers = int(redis.hget(keys.bloom(batch_id), "layers") or 0)
        doomed += [keys.bloom(batch_id)] + [keys.bloom_layer(batch_id, layer) for layer in range(layers)]
    redis.unlink(*doomed)
    if batch_ids:
        redis.srem(keys.blooms, *batch_ids)
