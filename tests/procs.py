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
