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
import signal
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

    def __init__(self, host: str = "127.0.0.1", *options: str):
        super().__init__(host)
        self.options = list(options)          # more of redis-server's options: --replicaof, --requirepass...

    def command(self) -> list:
        # Protected mode refuses clients from any address but loopback when there is no password,
        # and clients in a network namespace come from one; the server is private either way.
        return ["redis-server", "--port", str(self.port), "--bind", self.host, "--protected-mode", "no",
                "--save", "", "--appendonly", "no", "--dir", self.dir, *self.options]

    def kill(self) -> None:
        """SIGKILL: what it had not handed on is gone."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None

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


class PrivateSentinel(_Server):
    """A Redis Sentinel watching `service` (primary at 127.0.0.1:primary_port), quick to call a primary down."""

    name = "sentinel"

    def __init__(self, service: str, primary_port: int, password: str, redis_password: str,
                 down_after_ms: int = 1000, failover_timeout_ms: int = 3000):
        super().__init__()
        self.config = os.path.join(self.dir, "sentinel.conf")
        with open(self.config, "w") as f:
            f.write(f"port {self.port}\nbind 127.0.0.1\nprotected-mode no\ndir {self.dir}\n"
                    f"requirepass {password}\nsentinel sentinel-pass {password}\n"
                    f"sentinel monitor {service} 127.0.0.1 {primary_port} 2\n"
                    f"sentinel auth-pass {service} {redis_password}\n"
                    f"sentinel down-after-milliseconds {service} {down_after_ms}\n"
                    f"sentinel failover-timeout {service} {failover_timeout_ms}\n"
                    f"sentinel parallel-syncs {service} 1\n")

    def command(self) -> list:
        return ["redis-server", self.config, "--sentinel"]


class SentinelGroup:
    """A primary, a replica and three Sentinels on spare loopback ports, each with a password: what a highly
    available Redis is.

        with SentinelGroup() as group:
            group.url(3)                       # redis+sentinel://:PASSWORD@127.0.0.1:S1,...:S3/SERVICE/3
            group.sentinel_password            # for REDIS_SENTINEL_PASSWORD
            group.kill_primary(); group.wait_for_failover()
    """

    def __init__(self, service: str = "batchd-ha"):
        self.service = service
        self.password, self.sentinel_password = f"r-{uuid.uuid4().hex[:10]}", f"s-{uuid.uuid4().hex[:10]}"
        self.primary = PrivateRedis("127.0.0.1", "--requirepass", self.password, "--masterauth", self.password)
        self.replica = None
        self.sentinels: list = []

    def __enter__(self):
        self.primary.__enter__()
        self.replica = PrivateRedis("127.0.0.1", "--requirepass", self.password, "--masterauth", self.password,
                                    "--replicaof", "127.0.0.1", str(self.primary.port))
        self.replica.__enter__()
        _wait_until(lambda: "master_link_status:up" in self._redis(self.replica.port, "INFO", "replication"),
                    "the replica's link to its primary", self.replica.log_path)
        for _ in range(3):
            sentinel = PrivateSentinel(self.service, self.primary.port, self.sentinel_password, self.password)
            sentinel.__enter__()
            self.sentinels.append(sentinel)
        _wait_until(self._watched, "three Sentinels seeing each other and the replica", self.sentinels[0].log_path)
        return self

    def __exit__(self, *exc_info):
        for server in [*self.sentinels, self.replica, self.primary]:
            if server is not None:
                server.__exit__(*exc_info)

    def url(self, db: int = 0) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://:{self.password}@{hosts}/{self.service}/{db}"

    def primary_port(self) -> int:
        """The port of the primary as the first Sentinel answering names it."""
        for sentinel in self.sentinels:
            answer = self._sentinel(sentinel.port, "SENTINEL", "get-master-addr-by-name", self.service).split()
            if len(answer) == 2:
                return int(answer[1])
        raise RuntimeError("no Sentinel names a primary")

    def kill_primary(self, lag: float = 0.0) -> PrivateRedis:
        """SIGKILL the server that is the primary now; it is returned (stopped). With `lag`, the replica is
        stopped (SIGSTOP) and cut off that many seconds before, and let go as the primary dies: what the primary
        was told meanwhile never reaches it, as asynchronous replication loses the last writes of a failover."""
        port = self.primary_port()
        server, replica = (self.primary, self.replica) if self.primary.port == port else (self.replica, self.primary)
        if lag:
            replica.process.send_signal(signal.SIGSTOP)
            # Cut the link from the primary's side too: what it writes from now on stays with it.
            self._redis(port, "CLIENT", "KILL", "TYPE", "replica")
            time.sleep(lag)          # the writes the replica misses: a duration is what is asked for
        server.kill()
        if lag:
            replica.process.send_signal(signal.SIGCONT)
        return server

    def wait_for_failover(self, old_port: int, timeout: float = 30.0) -> float:
        """Seconds until every Sentinel names another primary than `old_port`."""
        started = time.monotonic()
        _wait_until(lambda: all(self._sentinel(s.port, "SENTINEL", "get-master-addr-by-name", self.service)
                                .split()[-1:] not in ([str(old_port)], []) for s in self.sentinels),
                    "the Sentinels' failover", self.sentinels[0].log_path, timeout)
        return time.monotonic() - started

    def _watched(self) -> bool:
        for sentinel in self.sentinels:
            primary = self._sentinel(sentinel.port, "SENTINEL", "master", self.service).split()
            fields = dict(zip(primary[::2], primary[1::2]))
            if fields.get("num-slaves") != "1" or fields.get("num-other-sentinels") != "2":
                return False
        return True

    def _redis(self, port: int, *command: str) -> str:
        return _cli(port, self.password, *command)

    def _sentinel(self, port: int, *command: str) -> str:
        return _cli(port, self.sentinel_password, *command)


def _cli(port: int, password: str, *command: str) -> str:
    result = subprocess.run(["redis-cli", "-p", str(port), "--no-auth-warning", "-a", password, *command],
                            capture_output=True, text=True, timeout=10)
    return result.stdout
