"""Servers of a test's own, for tests that stop a server: never the shared MariaDB (127.0.0.1:3306)
or Redis (127.0.0.1:6379), which every other test is using.

    with PrivateMariaDB() as db:          # mariadbd on a temporary datadir and a spare port
        url = db.create_database()        # mysql://root@127.0.0.1:PORT/NAME
        db.stop(); ...; db.start()        # the same data comes back
    with PrivateRedis() as r:             # redis-server on a spare port, no persistence
        r.url(3); r.stop(); r.start()
    PrivateRedis(host=net.host_ip)        # bound elsewhere (tests/netns.py): URLs name that address

Both need their server binaries (mariadbd + mariadb-install-db, redis-server): the machine's
packages, which .ci/run installs.
"""
import errno
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid

START_TIMEOUT = 60.0


def spare_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _wait_until(ready, what: str, log_path: str, timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.1)
    with open(log_path, errors="replace") as f:
        raise RuntimeError(f"{what} did not come up within {timeout} s:\n{f.read()[-2000:]}")


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


class _Server:
    """A server process on a spare port of `host` and a scratch directory, stopped and removed
    at exit."""

    name = "server"

    def __init__(self, host: str = "127.0.0.1"):
        self.host = host
        self.dir = tempfile.mkdtemp(prefix=f"batchd-{self.name}-")
        self.port = spare_port(host)
        self.log_path = os.path.join(self.dir, f"{self.name}.log")
        self.process = None

    def command(self) -> list:
        raise NotImplementedError

    def ready(self) -> bool:
        return _port_open(self.host, self.port)

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT)
        _wait_until(self.ready, self.name, self.log_path)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(60)
        self.process = None

    def __enter__(self):
        self.prepare()
        self.start()
        return self

    def __exit__(self, *exc_info):
        try:
            self.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def prepare(self) -> None:
        """Before the first start."""


class PrivateRedis(_Server):
    name = "redis"

    def command(self) -> list:
        # Protected mode refuses clients from any address but loopback when there is no password,
        # and clients in a network namespace come from one; the server is private either way.
        return ["redis-server", "--port", str(self.port), "--bind", self.host, "--protected-mode", "no",
                "--save", "", "--appendonly", "no", "--dir", self.dir]

    def url(self, db: int = 0) -> str:
        return f"redis://{self.host}:{self.port}/{db}"


class PrivateMariaDB(_Server):
    name = "mariadb"

    def prepare(self) -> None:
        self.datadir = os.path.join(self.dir, "data")
        # Its own tmpdir: temporary tables are named by pid, and two bootstraps in different pid namespaces
        # (tests/netns.py) sharing /tmp took each other's ("Unknown table 'mysql.tmp_user_sys'").
        os.makedirs(self.tmpdir, exist_ok=True)
        with open(self.log_path, "ab") as log:
            subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={self.datadir}", "--user=root",
                            "--auth-root-authentication-method=normal", "--skip-test-db",
                            f"--extra-file={self._root_from_anywhere()}", f"--tmpdir={self.tmpdir}"],
                           stdout=log, stderr=subprocess.STDOUT, check=True, timeout=120)

    @property
    def tmpdir(self) -> str:
        return os.path.join(self.dir, "tmp")

    def _root_from_anywhere(self) -> str:
        """SQL letting root in from any address: mariadb-install-db admits it only from localhost,
        127.0.0.1 and ::1, and a client in a network namespace connects from another address.
        (The bootstrap runs without grant tables: FLUSH PRIVILEGES loads them, or CREATE USER fails.)"""
        path = os.path.join(self.dir, "root-from-anywhere.sql")
        with open(path, "w") as f:
            f.write("FLUSH PRIVILEGES;\nCREATE USER 'root'@'%';\n"
                    "GRANT ALL PRIVILEGES ON *.* TO 'root'@'%' WITH GRANT OPTION;\n")
        return path

    def command(self) -> list:
        return ["mariadbd", "--no-defaults", f"--datadir={self.datadir}", f"--tmpdir={self.tmpdir}", "--user=root",
                f"--port={self.port}", f"--bind-address={self.host}",
                f"--socket={os.path.join(self.dir, 'mysqld.sock')}",
                f"--pid-file={os.path.join(self.dir, 'mysqld.pid')}",
                "--skip-log-bin", "--innodb-buffer-pool-size=16M", "--skip-name-resolve"]

    def ready(self) -> bool:
        if not _port_open(self.host, self.port):
            return False
        try:
            self.connect().close()
            return True
        except Exception:   # still starting: any client error means "not yet"
            return False

    def connect(self, database: str = ""):
        import MySQLdb
        return MySQLdb.connect(host=self.host, port=self.port, user="root", passwd="", db=database,
                               autocommit=True, connect_timeout=2)

    def create_database(self) -> str:
        name = "batchd_p_" + uuid.uuid4().hex[:8]
        conn = self.connect()
        conn.cursor().execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        conn.close()
        return self.url(name)

    def url(self, database: str) -> str:
        return f"mysql://root@{self.host}:{self.port}/{database}"


def fill_disk(directory) -> None:
    """Fill the filesystem under `directory` (a small tmpfs of the test's own) until it refuses a write;
    `directory/filler` holds the bytes, for the test to remove."""
    fd = os.open(os.path.join(directory, "filler"), os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)
