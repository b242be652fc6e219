"""What `python -m bench compare` measures around a contender's run, from outside its processes:

- `Run`: the contender's command started with its output on a pipe, each line stamped with the
  wall-clock time it arrived (sub-second, unlike the log's own timestamps); its exit waited for by
  os.wait4, whose rusage is the CPU of the whole tree (every child the tree reaped counts in its
  parent's, and so up to the root); and, every SAMPLE_EVERY seconds, the resident set of every
  process of the tree (/proc/<pid>/statm's resident pages: the VmRSS of /proc/<pid>/status, cheaper
  to read), its proportional and its private set (/proc/<pid>/smaps_rollup: Pss, and Private_Clean +
  Private_Dirty, what the process holds alone) and its CPU so far (/proc/<pid>/stat), kept per process
  with its last process title;
- `RedisCounters`, `MysqlCounters`: the private servers' own counters, read before and after;
- `cpu_seconds_of`: a server's CPU (user + system) from /proc, to see what a contender costs the
  servers it talks to.
"""
import os
import subprocess
import threading
import time
from typing import Optional

SAMPLE_EVERY = 0.2
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class ProcessTree:
    """The processes under `root` (the root too): peak resident bytes, CPU seconds at the last sample
    (short of a process's last SAMPLE_EVERY) and last title per pid.
    Children are found through each process's parent in /proc/<pid>/stat; only pids above the root's
    are read, since a child's pid is allocated after its parent's (this kernel has no
    /proc/<pid>/task/<tid>/children), which keeps a sample to a few small reads."""

    def __init__(self, root: int):
        self.root = root
        self.peak: dict = {}       # pid -> bytes
        self.cpu: dict = {}        # pid -> user + system seconds
        self.peak_pss: dict = {}   # pid -> bytes: shared pages count divided by their sharers
        self.peak_uss: dict = {}   # pid -> bytes: the pages no other process maps
        self.title: dict = {}      # pid -> cmdline as ps shows it (setproctitle's title, if any)

    def sample(self) -> None:
        parents, cpu = {}, {}
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) >= self.root:
                fields = _stat_fields(int(name))
                if fields is not None:
                    parents[int(name)], cpu[int(name)] = int(fields[1]), _cpu_seconds(fields)
        for pid in self._descendants(parents):
            resident = _resident_bytes(pid)
            if resident is None:
                continue
            self.peak[pid] = max(self.peak.get(pid, 0), resident)
            self.cpu[pid] = cpu[pid]
            pss, uss = _proportional_and_private_bytes(pid)
            self.peak_pss[pid] = max(self.peak_pss.get(pid, 0), pss)
            self.peak_uss[pid] = max(self.peak_uss.get(pid, 0), uss)
            title = _title_of(pid)
            if title:
                self.title[pid] = title

    def _descendants(self, parents: dict) -> list:
        inside, found = {self.root}, [self.root]
        for pid in sorted(parents):          # a parent's pid is below its children's
            if parents[pid] in inside and pid != self.root:
                inside.add(pid)
                found.append(pid)
        return found


def _read(path: str) -> Optional[str]:
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:          # the process ended between the listing and the read
        return None


def _stat_fields(pid: int) -> Optional[list]:
    """/proc/<pid>/stat's fields from the state on (field 3): [0] state, [1] parent, [11] utime..."""
    stat = _read(f"/proc/{pid}/stat")
    if not stat:
        return None
    # The command name may hold spaces and parentheses: the fields after the last ')' are plain.
    return stat.rsplit(")", 1)[1].split()


def _cpu_seconds(fields: list) -> float:
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS      # utime, stime: fields 14 and 15


def _resident_bytes(pid: int) -> Optional[int]:
    statm = _read(f"/proc/{pid}/statm")
    return int(statm.split()[1]) * PAGE_SIZE if statm else None


def _proportional_and_private_bytes(pid: int) -> tuple:
    fields = {}
    for line in (_read(f"/proc/{pid}/smaps_rollup") or "").splitlines()[1:]:
        name, _, value = line.partition(":")
        fields[name] = int(value.split()[0]) * 1024 if value.strip() else 0
    return fields.get("Pss", 0), fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)


def _title_of(pid: int) -> str:
    cmdline = _read(f"/proc/{pid}/cmdline") or ""
    return " ".join(part for part in cmdline.split("\0") if part)


def cpu_seconds_of(pid: int) -> float:
    """User + system CPU of a process (all its threads), from /proc/<pid>/stat."""
    fields = _stat_fields(pid)
    return _cpu_seconds(fields) if fields else 0.0


class Run:
    """One run of a command: its lines as they arrive, its exit, its tree's CPU and resident sets."""

    def __init__(self, command: list, env: dict, cwd: str):
        self.command, self.env, self.cwd = command, env, cwd
        self.lines: list = []          # (arrival time, text)
        self.started = self.ended = 0.0
        self.exit_code: Optional[int] = None
        self.cpu_seconds = 0.0
        self.tree: Optional[ProcessTree] = None

    def go(self, timeout: float) -> "Run":
        self.started = time.time()
        process = subprocess.Popen(self.command, env=self.env, cwd=self.cwd, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.tree = ProcessTree(process.pid)
        reader = threading.Thread(target=self._read_lines, args=(process.stdout,), name="bench-lines", daemon=True)
        reader.start()
        exited = threading.Event()
        waiter = threading.Thread(target=self._wait, args=(process, exited), name="bench-wait", daemon=True)
        waiter.start()
        deadline = time.monotonic() + timeout
        try:
            while not exited.wait(SAMPLE_EVERY):
                self.tree.sample()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{' '.join(self.command[:4])}... still running after {timeout:.0f} s; killed")
        except BaseException:          # the deadline, or the bench interrupted (^C): no batchd left behind
            self.tree.sample()
            _kill_tree(self.tree)
            exited.wait(10)
            raise
        reader.join(10)
        return self

    def _read_lines(self, pipe) -> None:
        for raw in pipe:
            self.lines.append((time.time(), raw.decode(errors="replace").rstrip("\n")))
        pipe.close()

    def _wait(self, process: subprocess.Popen, exited: threading.Event) -> None:
        # wait4 rather than Popen.wait: the rusage of the whole tree comes with the exit.
        _, status, usage = os.wait4(process.pid, 0)
        self.ended = time.time()
        self.exit_code = os.waitstatus_to_exitcode(status)
        process.returncode = self.exit_code          # so Popen does not wait for it again
        self.cpu_seconds = usage.ru_utime + usage.ru_stime
        exited.set()

    def first_line_time(self, pattern) -> Optional[float]:
        for arrived, text in self.lines:
            if pattern.search(text):
                return arrived
        return None

    def tail(self, count: int = 40) -> str:
        return "\n".join(text for _, text in self.lines[-count:])


def _kill_tree(tree: ProcessTree) -> None:
    for pid in sorted(tree.peak, reverse=True):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass


class RedisCounters:
    """INFO stats of a private redis-server. Round trips are its `total_writes_processed`: one write
    of replies per request the client waited for, whether the request was one command, a pipeline or
    a Lua script (whose inner redis.call()s `total_commands_processed` counts one by one)."""

    def __init__(self, url: str):
        import redis
        self.client = redis.Redis.from_url(url)

    def read(self) -> dict:
        info = self.client.info()          # the default sections hold both stats and cpu
        # Redis's own getrusage, in microseconds: /proc's clock ticks (10 ms) cannot tell a short run's
        # few milliseconds from none.
        return {"round_trips": info["total_writes_processed"], "commands": info["total_commands_processed"],
                "cpu_seconds": info["used_cpu_user"] + info["used_cpu_sys"]}

    @staticmethod
    def delta(before: dict, after: dict) -> dict:
        # The INFO that read `before` is counted in `after` (its reply was written after it read the counters).
        return {"round_trips": after["round_trips"] - before["round_trips"] - 1,
                "commands": after["commands"] - before["commands"] - 1,
                "cpu_seconds": after["cpu_seconds"] - before["cpu_seconds"]}


class MysqlCounters:
    """`Questions` of a private mariadbd: the statements clients sent (those inside triggers and
    stored programs, and pings, are not counted)."""

    def __init__(self, connect):
        self.conn = connect()

    def read(self) -> dict:
        cur = self.conn.cursor()
        cur.execute("SHOW GLOBAL STATUS LIKE 'Questions'")
        return {"statements": int(cur.fetchone()[1])}

    @staticmethod
    def delta(before: dict, after: dict) -> dict:
        # The SHOW that read `before` counts in `after`, as with Redis.
        return {"statements": after["statements"] - before["statements"] - 1}

    def close(self) -> None:
        self.conn.close()
