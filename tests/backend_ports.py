"""The ports of every backend kind, opened for a test: the fixtures of the ports' contract tests
(tests/backends/test_ports.py) and of any test that needs a backend's ports of each kind."""
import uuid

import pytest

from batchd.backends import open_backend
from batchd.backends.memory import MemoryBatchStore
from batchd.backends.ports import Backend
from batchd.config import load_settings

KINDS = ["memory", "mysql_redis", "sqlite"]
SHARED_KINDS = ["mysql_redis", "sqlite"]     # reached by several processes
LONG = 60.0          # a lease or TTL that never runs out during a test
SHORT = 0.3          # one that runs out soon: waited for, never slept through


class BackendUnderTest:
    """One backend kind: the settings that name it, and Backends on it for any namespace (each open is
    another client, as another process would hold; memory's are one object per store and namespace)."""

    def __init__(self, kind: str, settings, redis_url=None):
        self.kind, self.settings, self.redis_url = kind, settings, redis_url
        self.namespace = "tp" + uuid.uuid4().hex[:12]
        self._memory_store = MemoryBatchStore() if kind == "memory" else None
        self._opened: list = []
        self._namespaces = {self.namespace}

    def open(self, namespace=None) -> Backend:
        namespace = namespace or self.namespace
        self._namespaces.add(namespace)
        backend = open_backend(self.settings, namespace, self._memory_store)
        self._opened.append(backend)
        return backend

    def other_namespace(self) -> Backend:
        return self.open("tp" + uuid.uuid4().hex[:12])

    def close(self) -> None:
        for backend in self._opened:
            backend.close()
        if self.redis_url:
            import redis
            client = redis.Redis.from_url(self.redis_url)
            for namespace in self._namespaces:
                keys = list(client.scan_iter(match=f"{namespace}:*"))
                if keys:
                    client.delete(*keys)
            client.close()


def under_test(kind, request, tmp_path) -> BackendUnderTest:
    if kind == "memory":
        return BackendUnderTest(kind, load_settings({}))
    if kind == "sqlite":
        return BackendUnderTest(kind, load_settings({"STORE": f"sqlite:///{tmp_path / 'batchd.db'}"}))
    redis_url = request.getfixturevalue("redis_url")
    settings = load_settings({"MYSQL_URL": request.getfixturevalue("mysql_url"), "REDIS_URL": redis_url})
    return BackendUnderTest(kind, settings, redis_url)


@pytest.fixture(params=KINDS)
def opener(request, tmp_path):
    opened = under_test(request.param, request, tmp_path)
    yield opened
    opened.close()


@pytest.fixture(params=SHARED_KINDS)
def shared_opener(request, tmp_path):
    opened = under_test(request.param, request, tmp_path)
    yield opened
    opened.close()


@pytest.fixture
def ports(opener) -> Backend:
    return opener.open()


def rows(*ids) -> list:
    return [{"id": i, "url": f"http://x.invalid/{i}"} for i in ids]


def pushed(queue, *ids, batch_id=1) -> None:
    queue.push(batch_id, rows(*ids), "id")
