"""The Redis key layout is written down once for the code and once for operators, and the two cannot drift:
the keys `Keys` builds (backends/mysql_redis/redis_keys.py), the list in that module's docstring and the table
of docs/architecture.md (The Redis key schema) name the same keys."""
import inspect
import os
import re

from batchd.backends.mysql_redis import redis_keys
from batchd.backends.mysql_redis.redis_keys import Keys
from procs import ROOT

NAMESPACE = "ns"
NOT_KEYS = ("key", "batch_keys")      # Keys' own plumbing: a key of any name, and a list of keys


def stem(key: str) -> str:
    """`tally:<batch id>` -> `tally`: a key's fixed first part."""
    return key.split(":")[0]


def built_by_keys() -> set:
    keys = Keys(NAMESPACE)
    built = set()
    for name, member in vars(Keys).items():
        if name.startswith("_") or name in NOT_KEYS:
            continue
        if isinstance(member, property):
            built.add(getattr(keys, name))
        elif inspect.isfunction(member):
            arguments = ["x"] * (len(inspect.signature(member).parameters) - 1)
            built.add(getattr(keys, name)(*arguments))
    return {stem(key.removeprefix(f"{NAMESPACE}:")) for key in built}


def in_the_docstring() -> set:
    return {stem(match) for match in re.findall(r"^    ([a-z_]+)\S*\s", redis_keys.__doc__, re.MULTILINE)}


def in_the_architecture() -> set:
    with open(os.path.join(ROOT, "docs", "architecture.md"), encoding="utf-8") as f:
        page = f.read()
    section = page.split("## The Redis key schema", 1)[1].split("\n#", 1)[0]
    return {stem(match) for match in re.findall(r"^\| `([^`]+)`", section, re.MULTILINE)}


def test_every_key_keys_builds_is_listed_in_its_docstring_and_in_the_architecture():
    built = built_by_keys()
    assert "batch_pending" in built and "status" in built
    assert in_the_docstring() == built
    assert in_the_architecture() == built


def test_the_key_names_operators_rely_on_do_not_change():
    keys = Keys("crawl")
    assert [keys.pending, keys.done, keys.leases, keys.master_lock, keys.tally(7), keys.status("h:run"),
            keys.breaker("example.com"), keys.rate("example.com"), keys.host_gauges_pattern()] == \
        ["crawl:batch_pending", "crawl:batch_done", "crawl:leases", "crawl:master_lock", "crawl:tally:7",
         "crawl:status:h:run", "crawl:breaker:example.com", "crawl:rate:example.com", "crawl:host_gauges:*"]
