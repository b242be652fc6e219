"""batchd processes started by tests: output captured to a file, signals, waits with timeouts."""
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)      # the repository: this tree's batchd, before any installed one
RUNNER = os.path.join(HERE, "spiders", "run.py")


class Proc:
    def __init__(self, args, env=None, log_path=None, cwd=HERE):
        self.log_path = log_path or f"/tmp/batchd-test-{os.getpid()}-{time.monotonic_ns()}.log"
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("BATCHD_")}
        full_env.update({"PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join([HERE, ROOT])}, **(env or {}))
        self._log = open(self.log_path, "wb")
        self.popen = subprocess.Popen(args, env=full_env, cwd=cwd, stdout=self._log, stderr=subprocess.STDOUT)
        self.pid = self.popen.pid

    @classmethod
    def spider(cls, target, role, env=None):
        """Run `target` (module:Class) through tests/spiders/run.py as master / worker (see there)."""
        return cls([sys.executable, RUNNER, target, role], env=env)

    def output(self) -> str:
        self._log.flush()
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def wait_output(self, text, timeout=30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.output():
                return
            if self.popen.poll() is not None and text not in self.output():
                break
            time.sleep(0.05)
        raise AssertionError(f"{text!r} not in the output of pid {self.pid} within {timeout} s:\n{self.output()[-3000:]}")

    def send(self, sig=signal.SIGTERM):
        self.popen.send_signal(sig)

    def wait(self, timeout=60.0) -> int:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"pid {self.pid} still running after {timeout} s:\n{self.output()[-3000:]}") from None

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self):
        if self.alive():
            self.popen.kill()
            self.popen.wait(10)
        self._log.close()


class Procs:
    """Every process a test started, killed at the end whatever happened."""

    def __init__(self):
        self.started = []

    def add(self, proc):
        self.started.append(proc)
        return proc

    def close(self):
        for proc in self.started:
            proc.stop()


def live(pids):
    """Those of `pids` still running (a zombie waits for its reaper, and runs nothing)."""
    running = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rpartition(")")[2].split()[0] != "Z":
                    running.append(pid)
        except OSError:
            continue
    return running


# A process that holds some memory and, under it, one that holds more: a worker and its browser, as the
# supervisor's report measures them (batchd/reporting/process_memory.py).
HOLDER = """
import subprocess, sys
held = b"w" * ({own} << 20)          # written, so resident (a bytearray of zeros may stay unmapped)
below = subprocess.Popen([sys.executable, "-c", {grandchild!r}], stdout=subprocess.PIPE)
grandchild = below.stdout.readline().split()[1]
print("ready", grandchild.decode(), flush=True)
sys.stdin.read()                     # until the test closes our stdin (the grandchild's too: it is inherited)
below.wait()
"""
HELD_BELOW = """
import os, sys
held = b"g" * ({below} << 20)
print("ready", os.getpid(), flush=True)
sys.stdin.read()
"""


class MemoryTree:
    """A child holding `own` MiB and a grandchild holding `below` MiB, both resident once `pid` and
    `grandchild` are set; closed, both end."""

    def __init__(self, own: int, below: int):
        script = HOLDER.format(own=own, grandchild=HELD_BELOW.format(below=below))
        self.popen = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.pid = self.popen.pid
        self.grandchild = int(self.popen.stdout.readline().split()[1])    # once both hold their memory

    def close(self) -> None:
        self.popen.stdin.close()
        self.popen.wait(10)
        self.popen.stdout.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
