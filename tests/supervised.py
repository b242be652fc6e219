"""Driving a real `batchd` supervisor from a test: start it on a backend, find its children in
/proc, listen on a NOTIFY_SOCKET the way systemd does.

    proc = start_batchd(procs, mysql_backend, "run", "--workers", "3", CHILD_TIMEOUT=3)
    wait_for(lambda: len(workers_of(proc.pid)) == 3)
    with NotifySocket() as notify:          # env: notify.env(WATCHDOG_USEC=...)
        notify.wait_for("READY=1"); notify.senders() == {proc.pid}
    status_snapshot(mysql_backend)          # what the supervisor publishes in Redis
    value(scrape(port), "batchd_tasks_total", outcome="done")   # its /metrics (METRICS_PORT=port)
"""
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid

from harness import wait_for
from procs import HERE, Proc

SEED = "spiders/seed.py:CrawlTask"        # relative to tests/, where Proc runs
# Short clocks so that leases, heartbeats and status lines happen within a test's seconds.
DAEMON_SETTINGS = {"CHILD_TIMEOUT": 3.0, "BATCH_LOST_TASK_STALE": 2.5, "STATUS_INTERVAL": 0.5,
                   "STOP_TIMEOUT": 20.0}


def batchd_command(*args) -> list:
    return [sys.executable, "-m", "batchd", *args]


def start_batchd(procs, backend, verb, *args, spider=SEED, env=None, **settings):
    """`batchd VERB SPIDER ARGS` on the backend's database, Redis and namespace."""
    full_env = backend.env(**{**DAEMON_SETTINGS, **settings})
    full_env.update({"BATCHD_CONFIG": os.devnull, **(env or {})})
    command = batchd_command(verb, *([spider] if spider else []), *args)
    return procs.add(Proc(command, env=full_env))


def slow_urls(site, count, seconds=0.4):
    """Pages that take a while, one distinct URL per task."""
    return [site.url(f"/slow?seconds={seconds}&task={n}") for n in range(1, count + 1)]


def gated_urls(site, count):
    """Pages held until the test opens the site's gate (site.gate.set(): tests/httpserver.py /gated/<n>), one
    distinct URL per task: a batch with them cannot finish, nor its workers write them back, before the test
    has done what it would otherwise race."""
    return [site.url(f"/gated/{n}") for n in range(1, count + 1)]


# -- the process tree, from /proc
def children_of(pid: int) -> list:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry))
    return sorted(found)


def title(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def workers_of(pid: int) -> list:
    return [child for child in children_of(pid) if title(child).startswith("batchd: worker")]


def masters_of(pid: int) -> list:
    return [child for child in children_of(pid) if title(child).startswith("batchd: master")]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def lines_with(proc, text: str) -> list:
    return [line for line in proc.output().splitlines() if text in line]


# -- what the supervisor publishes
def status_snapshot(backend) -> dict:
    """The (only) supervisor snapshot in the backend's Redis namespace, as strings ({} before the first
    one); its "workers" field decoded into a list."""
    import redis
    client = redis.Redis.from_url(backend.redis_url)
    try:
        key = next(iter(client.scan_iter(f"{backend.namespace}:status:*")), None)
        fields = {k.decode(): v.decode() for k, v in client.hgetall(key).items()} if key else {}
    finally:
        client.close()
    if "workers" in fields:
        fields["workers"] = json.loads(fields["workers"])
    return fields


# -- what the supervisor serves with METRICS_PORT
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict:
    """{(sample name, ((label, value), ...) but the namespace): value} of one /metrics answer, read as
    Prometheus reads it."""
    import requests
    from prometheus_client.parser import text_string_to_metric_families
    answer = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    answer.raise_for_status()
    samples = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "namespace"))
            samples[(sample.name, labels)] = sample.value
    return samples


def try_scrape(port: int) -> dict:
    """scrape(), or {} while nothing listens yet."""
    import requests
    try:
        return scrape(port)
    except requests.ConnectionError:
        return {}


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


# -- systemd's side of sd_notify
# SO_TIMESTAMPNS (Linux's asm-generic/socket.h; the socket module does not name it): each datagram comes with
# the time the kernel queued it, which for AF_UNIX is when its sender sent it.
SO_TIMESTAMPNS = 35


class NotifySocket:
    """An AF_UNIX datagram socket with SO_PASSCRED: every message is kept with its sender's pid
    and the time it was sent (the kernel's stamp: on a busy machine this socket's thread reads late, and
    reading times would bunch up where the sender kept its rhythm), as systemd sees them."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="batchd-notify-")
        self.path = os.path.join(self.dir, "notify.sock")
        self.messages = []          # (monotonic time it was sent, sender pid, [fields])
        self._lock = threading.Lock()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(self.path)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self._sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self._sock.settimeout(0.2)
        self._running = True
        self._thread = threading.Thread(target=self._receive, name="notify-socket", daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc_info):
        self._running = False
        self._thread.join(2)
        self._sock.close()
        os.unlink(self.path)
        os.rmdir(self.dir)

    def env(self, **extra) -> dict:
        return {"NOTIFY_SOCKET": self.path, **{k: str(v) for k, v in extra.items()}}

    def _receive(self) -> None:
        while self._running:
            try:
                data, ancillary, _, _ = self._sock.recvmsg(4096, socket.CMSG_SPACE(12) + socket.CMSG_SPACE(16))
            except socket.timeout:
                continue
            read_at, wall = time.monotonic(), time.time()
            pid, sent_at = None, read_at
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid = struct.unpack("iII", payload)[0]
                elif level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    seconds, nanoseconds = struct.unpack("qq", payload)
                    sent_at = read_at - (wall - (seconds + nanoseconds / 1e9))     # on the monotonic clock
            with self._lock:
                self.messages.append((sent_at, pid, data.decode().split("\n")))

    def fields(self, prefix: str) -> list:
        """(time, field) of every field starting with `prefix`, in order."""
        with self._lock:
            return [(t, field) for t, _, fields in self.messages for field in fields if field.startswith(prefix)]

    def senders(self) -> set:
        with self._lock:
            return {pid for _, pid, _ in self.messages}

    def wait_for(self, prefix: str, count: int = 1, timeout: float = 60.0) -> list:
        return wait_for(lambda: len(self.fields(prefix)) >= count and self.fields(prefix), timeout,
                        message=f"{count} x {prefix!r} on the notify socket")

    def barrier(self, timeout: float = 30.0) -> None:
        """Return once everything sent to the socket before this call has been received: a datagram
        of the test's own joins the same receive queue behind it and is waited for (then dropped)."""
        mark = f"X_TEST_MARK={uuid.uuid4().hex}"
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
            sender.sendto(mark.encode(), self.path)
        self.wait_for(mark, timeout=timeout)
        with self._lock:
            self.messages = [m for m in self.messages if mark not in m[2]]


def batchd(*args, backend=None, env=None, timeout=60) -> subprocess.CompletedProcess:
    """One `batchd` command to its end, in tests/, with the backend's settings in the environment."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("BATCHD_")}
    full_env.update(backend.env() if backend else {}, BATCHD_CONFIG=os.devnull, **(env or {}))
    return subprocess.run(batchd_command(*args), cwd=HERE, env=full_env, capture_output=True, text=True,
                          timeout=timeout)


def one_error_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]
