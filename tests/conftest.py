"""Shared fixtures: a fresh MariaDB database and a flushed Redis db per test, a real local site,
and `backend`, which runs one test against every store batchd ships.

The shared servers are the machine's (127.0.0.1:3306 root, 127.0.0.1:6379); override with
TEST_MYSQL_URL / TEST_REDIS_URL. Tests that stop a server start their own (tests/servers.py).
"""
import os
import signal
import sys
import uuid

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The batchd commands tests start run in tests/ (where a relative PYTHONPATH=. means tests/): they
# must import this tree's batchd too, not whichever one the environment has installed.
os.environ["PYTHONPATH"] = os.pathsep.join([ROOT, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])

from harness import retrying_downloader  # noqa: E402
from httpserver import TestSite  # noqa: E402
from taskdb import MemoryBackend, MysqlBackend, SqliteBackend  # noqa: E402

# A suite started as a background job of a non-interactive shell (`.ci/run &`) inherits SIGINT ignored,
# and so would every process it starts: `batchd status --watch` would then never see the Ctrl-C its
# test sends. The handler Python installs itself is set back (children exec with SIGINT's default).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

MYSQL_URL = os.environ.get("TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/")
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/9")


@pytest.fixture(autouse=True)
def _no_batchd_environment(monkeypatch):
    """A developer's BATCHD_* variables or /etc file must not leak into a test."""
    for name in list(os.environ):
        if name.startswith("BATCHD_") or name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "INVOCATION_ID",
                                                   "JOURNAL_STREAM", "STATE_DIRECTORY"):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("BATCHD_CONFIG", os.devnull)


@pytest.fixture
def site():
    with TestSite() as s:
        yield s


@pytest.fixture
def sends():
    """When every Downloader of the test's process sent each attempt (tests/pacing.py): paces measured at the sender."""
    from pacing import Sends
    recorder = Sends().install()
    yield recorder
    recorder.remove()


@pytest.fixture
def mysql_url():
    """The URL of a fresh, empty database, dropped afterwards."""
    import MySQLdb
    name = "batchd_t_" + uuid.uuid4().hex[:12]
    admin = MySQLdb.connect(**_admin_args())
    admin.cursor().execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    try:
        yield MYSQL_URL.rstrip("/") + "/" + name
    finally:
        admin.cursor().execute(f"DROP DATABASE IF EXISTS `{name}`")
        admin.close()


def _admin_args() -> dict:
    from batchd.backends.mysql_redis.mysql import parse_mysql_url
    args = parse_mysql_url(MYSQL_URL.rstrip("/") + "/mysql")
    args.pop("db")
    return args


@pytest.fixture
def redis_url():
    """The shared Redis; each test backend works in a namespace of its own and deletes it after."""
    return REDIS_URL


@pytest.fixture
def failed_items_path(tmp_path):
    return str(tmp_path / "failed_items.jsonl")


@pytest.fixture(params=["memory", "mysql", "sqlite"])
def backend(request, tmp_path, failed_items_path):
    """One suite, every store: the same test body runs on each backend."""
    if request.param == "memory":
        yield MemoryBackend(failed_items_path)
    elif request.param == "sqlite":
        sqlite = SqliteBackend(tmp_path / "batchd.db", failed_items_path)
        yield sqlite
        sqlite.close()
    else:
        url = request.getfixturevalue("mysql_url")
        mysql = MysqlBackend(url, request.getfixturevalue("redis_url"), failed_items_path)
        yield mysql
        mysql.close()


@pytest.fixture(params=["mysql", "sqlite"])
def shared_backend(request, tmp_path, failed_items_path):
    """The stores that master and workers reach from separate processes."""
    if request.param == "sqlite":
        shared = SqliteBackend(tmp_path / "batchd.db", failed_items_path)
    else:
        shared = MysqlBackend(request.getfixturevalue("mysql_url"), request.getfixturevalue("redis_url"),
                              failed_items_path)
    yield shared
    shared.close()


@pytest.fixture
def mysql_backend(mysql_url, redis_url, failed_items_path):
    """MySQL + Redis alone, for what only a server-backed store shows."""
    mysql = MysqlBackend(mysql_url, redis_url, failed_items_path)
    yield mysql
    mysql.close()


@pytest.fixture
def private_mysql(redis_url, failed_items_path):
    """(server, backend): a mariadbd of the test's own (tests/servers.py), for tests that stop it."""
    from servers import PrivateMariaDB
    with PrivateMariaDB() as db:
        backend = MysqlBackend(db.create_database(), redis_url, failed_items_path)
        yield db, backend
        backend.close()


@pytest.fixture
def small_disk(tmp_path):
    """A 64 KiB tmpfs of the test's own, to fill or remount read-only (root ignores file modes: only a
    real mount refuses a write); unmounted at the end."""
    import subprocess
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=True)


@pytest.fixture
def procs():
    from procs import Procs
    started = Procs()
    yield started
    started.close()


CHAOS_FIGURES: list = []     # every CHAOS line of this run, gathered where pytest reports (xdist's controller)


@pytest.fixture(autouse=True)
def _chaos_figures(request):
    """A scenario's CHAOS lines ride on its report (user_properties), so that they reach the summary from
    whichever xdist worker ran it."""
    from chaos import VERDICTS
    yield
    request.node.user_properties.extend(("chaos", line) for line in VERDICTS)
    VERDICTS.clear()


def pytest_runtest_logreport(report):
    if report.when == "teardown":
        CHAOS_FIGURES.extend(line for name, line in report.user_properties if name == "chaos")


def pytest_terminal_summary(terminalreporter):
    """The chaos scenarios' figures, one CHAOS line each, whatever pytest captured (docs/reliability.md quotes them)."""
    if CHAOS_FIGURES:
        terminalreporter.section("chaos figures")
        for line in CHAOS_FIGURES:
            terminalreporter.write_line(line)


@pytest.fixture
def make_downloader():
    """Downloaders with backoff small enough to keep the file fast; all closed afterwards."""
    made = []

    def make(**options):
        if hasattr(options.get("sleep"), "clock"):       # a recording sleep: the retries' clock moves with its waits
            options["clock"] = options["sleep"].clock
        downloader = retrying_downloader(**options)
        made.append(downloader)
        return downloader

    yield make
    for downloader in made:
        downloader.close()
