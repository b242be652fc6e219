"""REQUEST_FILTER = "bloom": a batch's requests in a scalable Bloom filter of Redis bitmaps, and the dropping of a
batch's filter (either kind) without blocking Redis.

A fingerprint costs about 2 bytes of Redis rather than the exact set's 80, at the price of a few new requests taken
for ones already made (REQUEST_FILTER_ERROR_RATE of them at most): those are not made. lua/bloom_first_seen.lua
tests and adds a fingerprint in one step, so a request that passes the filter costs one round trip, as the exact
filter's SADD does; its layers and where a fingerprint's bits lie are told there, their sizes in
bloom_geometry.py.

Keys (redis_keys.py): bloom:<batch> (the filter's HASH) and its bitmaps bloom:<batch>:<layer>, blooms (the batches
with a filter). A batch's filter is dropped when it closes (the master's set_done), and any left over when the
next opens (clear_batch); UNLINK frees them in Redis's background thread, so a filter of 100 M fingerprints
(200 MB) or an exact set of as many (8 GB) never stalls the Redis everything else shares.
"""
import hashlib
import re
from typing import NamedTuple

from ...errors import BatchdError, ConfigError
from ..ports import EVERY_BATCH
from .bloom_geometry import LAYOUT, layer_shape
from .lua_scripts import LuaScript, run_registered
from .redis_keys import SEEN_TTL, Keys
from .redis_port import RedisPort, translated

_READ_DIGITS = re.compile(r"[0-9a-fA-F]{24}").match     # the script reads two 48-bit hashes from 24 hex digits
LEARNING_ROUNDS = 1000  # calls a first_seen_many may take: a learning call between two that answer, at most
BATCHES_KNOWN = 4       # filters a worker keeps its view of: this batch's, and a straggler's of the last


def as_digest(fingerprint: str) -> str:
    """The fingerprint as the script reads it: a hex digest (Request.fingerprint: sha1) as it is, anything
    else hashed first."""
    if _READ_DIGITS(fingerprint):
        return fingerprint
    return hashlib.sha1(fingerprint.encode()).hexdigest()


class FilterView(NamedTuple):
    """A batch's filter as this process last learnt it (its own capacity, error rate and layout, and its
    layers), or as it would make it."""

    capacity: str
    error_rate: str
    layout: str
    layers: int

    def arguments(self, batch_id: int, verify: bool) -> list:
        """The script's arguments before the fingerprints (lua/bloom_first_seen.lua says them)."""
        shapes = [str(value) for layer in range(self.layers)
                  for value in layer_shape(int(self.capacity), float(self.error_rate), layer)]
        check = f"{self.capacity} {self.error_rate} {self.layout} {batch_id}" if verify else ""
        return [argument.encode() for argument in [str(SEEN_TTL), str(self.layers - 1), *shapes, check]]


class RedisBloomFilter(RedisPort):
    """The SeenFilter port for REQUEST_FILTER = "bloom": one scalable, blocked Bloom filter per batch.

    The script is told the layers' shapes with each call, so that it reads nothing of the filter but the bits
    a fingerprint falls on: this port keeps, per batch, what it last learnt of the filter, and learns again
    (one round trip more) when the script says the filter has changed."""

    _first_seen = LuaScript("bloom_first_seen")

    def __init__(self, url: str, namespace: str, client, capacity: int, error_rate: float):
        super().__init__(url, namespace, client)
        self.capacity, self.error_rate = capacity, error_rate
        self._known: dict = {}       # batch id: (its FilterView, the script's arguments and keys for it)

    @translated
    def first_seen(self, batch_id: int, fingerprint: str) -> bool:
        """(The worker's call, at every request it makes: the filter as known, straight to the script.)"""
        digest, known = as_digest(fingerprint), self._known.get(batch_id)
        if known is None:
            return self._answers(batch_id, [digest], self._new_view(), None)[0]
        view, arguments, keys = known
        reply = run_registered(self._first_seen, keys, arguments + [digest])
        if not isinstance(reply, list):         # (one fingerprint answered: its answer alone)
            return reply == 1
        return self._answers(batch_id, [digest], self._learnt(batch_id, view, reply, keys[0]), None)[0]

    @translated
    def first_seen_many(self, batch_id: int, fingerprints) -> list:
        """first_seen of each fingerprint in turn, in one call (the bench fills a filter so)."""
        view, arguments, _ = self._known.get(batch_id) or (self._new_view(), None, None)
        return self._answers(batch_id, [as_digest(fingerprint) for fingerprint in fingerprints], view, arguments)

    def _answers(self, batch_id: int, digests: list, view: FilterView, arguments) -> list:
        """The script's answers for `digests`, from `view` (its `arguments`, or None: to be verified), learning
        the filter as the script tells; the view it ends with is kept."""
        keys = [self.keys.bloom(batch_id), self.keys.blooms]
        answers: list = []
        for _ in range(LEARNING_ROUNDS):
            if arguments is None:
                arguments = view.arguments(batch_id, verify=True)
            reply = self._first_seen(keys=keys, args=arguments + digests[len(answers):])
            if not isinstance(reply, list) or not reply or reply[0] >= 0:
                answers += reply if isinstance(reply, list) else [reply]
                break
            answers += reply[4:]
            view, arguments = self._learnt(batch_id, view, reply, keys[0]), None
        else:
            raise BatchdError(f"the bloom filter of batch {batch_id} ({keys[0]}) changed under each of "
                              f"{LEARNING_ROUNDS} calls")
        if batch_id not in self._known or self._known[batch_id][0] != view:
            self._remember(batch_id, view)
        return [bool(answer) for answer in answers]

    def _new_view(self) -> FilterView:
        return FilterView(str(self.capacity), repr(self.error_rate), LAYOUT, 1)

    def _learnt(self, batch_id: int, view: FilterView, reply: list, key: str) -> FilterView:
        """The view after the script's learning reply: -1 - layers, then the filter's own settings or nils."""
        layers = -1 - reply[0]
        if layers == 0:                 # the filter was dropped or expired: made afresh
            return self._new_view()
        if reply[1] is not None:
            capacity, error_rate, layout = (_text(each) for each in reply[1:4])
            if layout != LAYOUT:
                raise ConfigError(f"the bloom filter of batch {batch_id} ({key}) was made in layout {layout!r}, "
                                  f"which this batchd does not read ({LAYOUT!r}): run one batchd version on every "
                                  "worker of a batch")
            view = view._replace(capacity=capacity, error_rate=error_rate, layout=layout)
        return view._replace(layers=layers)

    def _remember(self, batch_id: int, view: FilterView) -> None:
        self._known[batch_id] = (view, view.arguments(batch_id, verify=False),
                                 [self.keys.bloom(batch_id), self.keys.blooms])
        while len(self._known) > BATCHES_KNOWN:
            del self._known[min(self._known)]


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def drop_request_filters(redis, keys: Keys, batch_ids=None) -> None:
    """UNLINK the exact filter's set and the bloom filters of `batch_ids` (None: every batch's but
    REQUEST_FILTER_ACROSS_BATCHES's): Redis frees them in its background thread. (Not a MULTI: a filter half
    dropped is dropped again next time.)"""
    if batch_ids is None:
        batch_ids = [int(batch_id) for batch_id in redis.smembers(keys.blooms) if int(batch_id) != EVERY_BATCH]
    doomed = [keys.seen]
    for batch_id in batch_ids:
        layers = int(redis.hget(keys.bloom(batch_id), "layers") or 0)
        doomed += [keys.bloom(batch_id)] + [keys.bloom_layer(batch_id, layer) for layer in range(layers)]
    redis.unlink(*doomed)
    if batch_ids:
        redis.srem(keys.blooms, *batch_ids)
