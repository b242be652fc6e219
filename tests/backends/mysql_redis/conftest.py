"""The Redis ports' tests' fixtures: a client of the shared Redis, and a namespace of the test's own, its keys
deleted after."""
import uuid

import pytest

from batchd.backends.mysql_redis.redis_client import connect_redis


@pytest.fixture
def client(redis_url):
    client = connect_redis(redis_url)
    yield client
    client.close()


@pytest.fixture
def namespace(client):
    namespace = "t" + uuid.uuid4().hex[:12]
    yield namespace
    keys = list(client.scan_iter(match=f"{namespace}:*"))
    if keys:
        client.delete(*keys)
