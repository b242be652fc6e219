"""Tasks set aside: a worker's tasks whose next request may not go yet, held with their leases until it
may, while the fetch threads take other work.

A link of the download chain says when a request may not go (download/chain.py's NotYet): its host's
turn (CONCURRENT_REQUESTS_PER_DOMAIN, DOWNLOAD_DELAY, DOMAIN_RATE_LIMIT, Crawl-delay, the throttle), a
breaker open, a retry's backoff. Its task waits here, not in a thread: until the time said, or, for a
host with no free place (math.inf), until a request to that host ends in this worker (each end wakes
one such task, oldest first; a wake that finds the place taken again sets the task aside again), with
a look every INF_RECHECK besides, so a wake missed by a hair costs a moment, not the task.

The tasks set aside keep their leases (renewed with the others) and their ledger slots; a worker
holding HOST_SET_ASIDE_MAX of them leases no more until some go on, so a site that holds the first
ids of a table costs the worker that many tasks of memory, not its threads. A worker that leased
first may so hold most of a busy host's tasks while another worker has free places there, or, full,
lease nothing of the other hosts while the next worker does their work alone: once the queue is empty,
or once HOST_SET_ASIDE_MAX is reached, a worker hands back (LeaseQueue.hand_back, to the queue's tail) the tasks of a
host beyond 2 x CONCURRENT_REQUESTS_PER_DOMAIN waiting for a place (those that have sent nothing yet),
and every worker's idle threads lease them again. It does so every SHARE_EVERY while the others take
a real part of what it hands back; when it leases about as many back itself (the workers are even),
the gap doubles up to SHARE_MOST, so that even workers do not pass tasks to and fro. What the master's host
column (BATCH_TASK_HOST_FIELD) does for a table sorted by host is claim-side: see docs/architecture.md.
"""
import collections
import heapq
import itertools
import threading
import time

INF_RECHECK = 0.5          # s: a task waiting for a free place at its host looks again this often anyway


class SetAside:
    def __init__(self, most: int, clock=time.monotonic):
        self.most, self.clock = most, clock
        self._cond = threading.Condition()
        self._due: list = []                  # heap of (when, seq, run): seq breaks ties, oldest first
        self._for_a_place: dict = {}          # host -> deque of runs waiting for a free place
        self._entry: dict = {}                # id(run) -> the seq of its live heap entry (older ones are stale)
        self._hosts: collections.Counter = collections.Counter()
        self._host_of: dict = {}              # id(run) -> host
        self._seq = itertools.count()
        self._closed = False                  # the worker stops: no thread waits here any longer

    def put(self, run, host: str, after: float) -> None:
        """Set `run` aside for `after` seconds (math.inf: until a request to `host` ends)."""
        with self._cond:
            key = id(run)
            self._host_of[key] = host
            self._hosts[host] += 1
            if after == float("inf"):
                self._for_a_place.setdefault(host, collections.deque()).append(run)
                after = INF_RECHECK
            self._push(run, self.clock() + after)
            self._cond.notify()

    def host_done(self, host: str) -> None:
        """A request to `host` ended: a place there may be free for the oldest task waiting for one."""
        with self._cond:
            waiting = self._for_a_place.get(host)
            if not waiting:
                return
            run = waiting.popleft()
            if not waiting:
                del self._for_a_place[host]
            self._push(run, self.clock())
            self._cond.notify()

    def take(self):
        """A task whose wait is over, or None."""
        with self._cond:
            now = self.clock()
            while self._due and self._due[0][0] <= now:
                _, seq, run = heapq.heappop(self._due)
                if self._entry.get(id(run)) == seq:
                    self._forget(run)
                    return run
            return None

    def wait(self, longest: float) -> None:
        """Until a task's wait may be over (or something is set aside, or the worker stops), `longest` at most."""
        with self._cond:
            if self._closed:
                return
            if self._due:
                longest = min(longest, max(0.0, self._due[0][0] - self.clock()))
            if longest > 0:
                self._cond.wait(longest)

    def close(self) -> None:
        """The worker stops: its idle fetch threads go now, not at the end of their wait."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def full(self) -> bool:
        with self._cond:
            return len(self._entry) >= self.most

    def __len__(self) -> int:
        with self._cond:
            return len(self._entry)

    def by_host(self) -> dict:
        """Tasks set aside per host."""
        with self._cond:
            return dict(self._hosts)

    def surplus(self, keep: int, movable) -> list:
        """Take out the tasks waiting for a place at a host beyond the `keep` oldest there that
        `movable(run)` allows: what this worker holds of a busy host past what it can start soon, as
        (run, host) pairs."""
        taken = []
        with self._cond:
            for host, waiting in list(self._for_a_place.items()):
                spare = [run for run in list(waiting)[keep:] if movable(run)]
                for run in spare:
                    self._forget(run)
                    taken.append((run, host))
        return taken

    def drain(self) -> list:
        """Every task set aside (the worker stops: their leases are given back)."""
        with self._cond:
            runs = [run for _, seq, run in self._due if self._entry.get(id(run)) == seq]
            self._due, self._for_a_place, self._entry, self._host_of = [], {}, {}, {}
            self._hosts.clear()
            return runs

    def _push(self, run, when: float) -> None:
        seq = next(self._seq)
        self._entry[id(run)] = seq
        heapq.heappush(self._due, (when, seq, run))

    def _forget(self, run) -> None:
        key = id(run)
        del self._entry[key]
        host = self._host_of.pop(key)
        self._hosts[host] -= 1
        if not self._hosts[host]:
            del self._hosts[host]
        waiting = self._for_a_place.get(host)
        if waiting is not None and run in waiting:
            waiting.remove(run)
            if not waiting:
                del self._for_a_place[host]
