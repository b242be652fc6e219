"""How fast a batch's tasks settle: the master's progress lines and the supervisor's report read it the same way."""
import collections
import time

RATE_WINDOW = 120.0     # seconds of progress samples behind the rate and the ETA


class ProgressRate:
    """Settled tasks per second over the last RATE_WINDOW seconds (the master's ETA: master/timing.py)."""

    def __init__(self):
        self.samples: collections.deque = collections.deque()

    def add(self, settled: int) -> None:
        now = time.monotonic()
        self.samples.append((now, settled))
        while self.samples and now - self.samples[0][0] > RATE_WINDOW:
            self.samples.popleft()

    def clear(self) -> None:
        self.samples.clear()

    def per_second(self) -> float:
        if len(self.samples) < 2:
            return 0.0
        (t0, s0), (t1, s1) = self.samples[0], self.samples[-1]
        return max(0.0, (s1 - s0) / (t1 - t0)) if t1 > t0 else 0.0


def eta_words(seconds: float) -> str:
    """An ETA for a log line: 1h05m, 4m30s."""
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"
