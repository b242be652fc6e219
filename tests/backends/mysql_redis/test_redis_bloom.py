"""REQUEST_FILTER = "bloom" on the real Redis (backends/mysql_redis/redis_bloom.py, lua/bloom_first_seen.lua): a
filter past its capacity grows a layer rather than its error rate, forgets nothing it was told, and a batch's
filter (bloom or exact) goes when the batch closes, and any left over when the next opens, by UNLINK."""
import hashlib
import threading

import pytest

from batchd.backends import open_backend
from batchd.backends.mysql_redis.redis_bloom import RedisBloomFilter, as_digest
from batchd.backends.mysql_redis.redis_keys import Keys
from batchd.backends.mysql_redis.redis_leases import RedisLeaseQueue
from batchd.config import load_settings
from batchd.errors import ConfigError
from harness import wait_for

CAPACITY, ERROR_RATE = 500, 0.01     # small, and an error rate that a few thousand fingerprints measure


def fingerprint(n: int) -> str:
    return hashlib.sha1(f"https://example.com/{n}".encode()).hexdigest()


def test_past_its_capacity_a_filter_adds_layers_and_its_false_positives_stay_under_the_rate(client, namespace,
                                                                                            redis_url):
    bloom = RedisBloomFilter(redis_url, namespace, client, CAPACITY, ERROR_RATE)
    told = 3500        # seven times the capacity: layers of 500, 1000 and 2000
    # A layer is added inside a call as well as between two.
    answers = [bloom.first_seen(1, fingerprint(n)) for n in range(50)]
    for start in range(50, told, 700):
        answers += bloom.first_seen_many(1, [fingerprint(n) for n in range(start, min(told, start + 700))])
    false_positives = answers.count(False)
    state = client.hgetall(Keys(namespace).bloom(1))
    assert int(state[b"layers"]) == 3 and (state[b"capacity"], state[b"error"]) == (b"500", b"0.01")
    assert false_positives <= 2 * ERROR_RATE * told, false_positives
    assert not any(bloom.first_seen_many(1, [fingerprint(n) for n in range(told)])), "it forgot a fingerprint"
    assert bloom.first_seen(2, fingerprint(0)), "each batch has a filter of its own"


def test_a_filter_made_by_other_settings_keeps_its_own(client, namespace, redis_url):
    RedisBloomFilter(redis_url, namespace, client, CAPACITY, ERROR_RATE).first_seen(1, fingerprint(0))
    other = RedisBloomFilter(redis_url, namespace, client, 10 * CAPACITY, ERROR_RATE / 10)
    assert not other.first_seen(1, fingerprint(0))
    assert client.hmget(Keys(namespace).bloom(1), "capacity", "error") == [b"500", b"0.01"]


def test_a_worker_whose_view_is_behind_learns_the_layer_another_added_and_never_overfills_a_full_one(
        client, namespace, redis_url):
    keys = Keys(namespace)
    behind = RedisBloomFilter(redis_url, namespace, client, CAPACITY, ERROR_RATE)
    ahead = RedisBloomFilter(redis_url, namespace, client, CAPACITY, ERROR_RATE)
    assert behind.first_seen(1, fingerprint(0))                  # it knows the filter at one layer
    filled = ahead.first_seen_many(1, [fingerprint(n) for n in range(1, CAPACITY + 100)])     # a second layer
    assert client.hget(keys.bloom(1), "layers") == b"2"
    assert not any(behind.first_seen_many(1, [fingerprint(n) for n in range(CAPACITY + 100)]))
    answers = [behind.first_seen(1, fingerprint(n)) for n in range(CAPACITY + 100, CAPACITY + 200)]
    assert answers.count(False) <= 2, "the new ones went in"
    assert behind._known[1][0].layers == 2
    # The first layer took its capacity and not one more; every fingerprint added is counted in a layer.
    added = client.hmget(keys.bloom(1), "n0", "n1")
    assert int(added[0]) == CAPACITY and int(added[0]) + int(added[1]) == 1 + filled.count(True) + answers.count(True)


def test_workers_at_once_grow_the_filter_without_overfilling_a_layer_or_forgetting_a_fingerprint(
        client, namespace, redis_url):
    keys, told, threads = Keys(namespace), 6000, 4     # layers of 500, 1000, 2000 and 4000
    ports = [RedisBloomFilter(redis_url, namespace, client, CAPACITY, ERROR_RATE) for _ in range(threads)]
    answers: list = [None] * told

    def tell(worker: int) -> None:
        for n in range(worker, told, threads):
            answers[n] = ports[worker].first_seen(1, fingerprint(n))

    workers = [threading.Thread(target=tell, args=(worker,)) for worker in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    layers = int(client.hget(keys.bloom(1), "layers"))
    added = [int(n or 0) for n in client.hmget(keys.bloom(1), *[f"n{i}" for i in range(layers)])]
    assert layers == 4 and added[:3] == [CAPACITY, 2 * CAPACITY, 4 * CAPACITY], added
    assert sum(added) == answers.count(True) and answers.count(False) <= 2 * ERROR_RATE * told
    assert not any(ports[0].first_seen_many(1, [fingerprint(n) for n in range(told)])), "it forgot a fingerprint"


def test_a_filter_gone_under_a_worker_is_made_afresh_with_its_ttl(client, namespace, redis_url):
    keys = Keys(namespace)
    bloom = RedisBloomFilter(redis_url, namespace, client, CAPACITY, ERROR_RATE)
    assert bloom.first_seen(1, fingerprint(0))
    client.unlink(keys.bloom(1), keys.bloom_layer(1, 0))          # dropped (the batch closed) or expired
    assert bloom.first_seen(1, fingerprint(0)) and not bloom.first_seen(1, fingerprint(0))
    made = client.keys(f"{namespace}:bloom:1*")
    assert len(made) == 2 and all(client.ttl(key) > 0 for key in made)


def test_a_filter_in_a_layout_this_batchd_does_not_read_is_refused_in_one_line(client, namespace, redis_url):
    RedisBloomFilter(redis_url, namespace, client, CAPACITY, ERROR_RATE).first_seen(1, fingerprint(0))
    client.hset(Keys(namespace).bloom(1), "layout", "classic")
    with pytest.raises(ConfigError, match=r"bloom filter of batch 1 \(.*\) was made in layout 'classic'"):
        RedisBloomFilter(redis_url, namespace, client, CAPACITY, ERROR_RATE).first_seen(1, fingerprint(1))


def test_a_fingerprint_not_of_a_digest_is_hashed():
    assert as_digest(fingerprint(1)) == fingerprint(1)
    assert as_digest("not hex") == as_digest("not hex") != as_digest("not hex!")
    assert len(as_digest("abc")) == 40


def test_a_batch_closing_unlinks_its_filter_and_the_next_opening_any_left_over(client, namespace, redis_url):
    keys, leases = Keys(namespace), RedisLeaseQueue(redis_url, namespace, client)
    bloom = RedisBloomFilter(redis_url, namespace, client, CAPACITY, ERROR_RATE)
    for batch_id in (1, 2):
        bloom.first_seen_many(batch_id, [fingerprint(n) for n in range(CAPACITY + 1)])      # a second layer
    client.sadd(keys.seen, *[f"2:{fingerprint(n)}" for n in range(100)])   # past 64 members: freed lazily
    lazily_freed = client.info("memory")["lazyfreed_objects"]
    leases.set_done(2)
    assert client.keys(f"{namespace}:bloom:2*") == [] and not client.exists(keys.seen)
    wait_for(lambda: client.info("memory")["lazyfreed_objects"] > lazily_freed,
             message="the exact set freed in Redis's background thread")
    assert sorted(client.keys(f"{namespace}:bloom:1*")) == [k.encode() for k in sorted(
        [keys.bloom(1), keys.bloom_layer(1, 0), keys.bloom_layer(1, 1)])]
    leases.clear_batch()                          # batch 1's close was missed: the next opening drops it
    assert client.keys(f"{namespace}:bloom*") == []


def test_bloom_is_redis_s_and_an_sqlite_store_keeps_the_exact_filter_saying_so(tmp_path, caplog):
    settings = load_settings({"STORE": f"sqlite:///{tmp_path / 'b.db'}", "REQUEST_FILTER_ENABLE": True,
                              "REQUEST_FILTER": "bloom"})
    with caplog.at_level("INFO", logger="batchd"):
        backend = open_backend(settings, "ns")
    assert backend.seen.first_seen(1, "fp") and not backend.seen.first_seen(1, "fp")
    backend.close()
    said = [r.getMessage() for r in caplog.records if "REQUEST_FILTER" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith('REQUEST_FILTER = "bloom" is for Redis: SQLite')
