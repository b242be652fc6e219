"""A network namespace joined to the host by a veth pair that a test can cut and heal: the means to
partition one batchd process from Redis and MariaDB while everything else carries on.

    with Partition() as net, PrivateRedis(host=net.host_ip) as redis_server:
        worker = net.popen([sys.executable, "-m", "batchd", "worker", ...],
                           env={"BATCHD_REDIS_URL": redis_server.url(0), ...})   # a procs.Proc
        net.cut()     # both ways, silently: established connections hang, new ones time out
        net.heal()    # the same connections carry on: TCP retransmits what the cut swallowed

Servers on the host bind `net.host_ip` to be reached from inside (`net.inside_ip` is the other
end). The namespace has only its loopback and its end of the veth: 127.0.0.1 there is its own, so
the shared servers (127.0.0.1:3306, :6379) are out of its reach.

How a cut works: both ends hold a permanent neighbour (ARP) entry for the other, so no ARP ever
runs; `cut()` points both entries at a MAC address that no interface has, and each end's kernel
drops the frames that reach it as addressed to another host. Links stay up and routes stay put, so
senders see their packets leave and nothing comes back: no reset, no "unreachable", no error,
exactly a partition. Taking the link down instead would remove the host's route to the namespace
and send the replies out of the default route; nftables, iptables and tc's drop action are not on
every machine (this one has none of them), while this needs only iproute2's `ip` (and root).

Names carry the creating process's pid (batchd-<pid>-<token>); a namespace whose creator is gone
(a killed run) is removed by the next Partition, and a fresh /30 is chosen among those no host
address uses, so leftovers never clash with a new run.
"""
import contextlib
import fcntl
import os
import random
import re
import secrets
import shutil
import signal
import subprocess

from harness import wait_for
from procs import Proc

IP = shutil.which("ip") or "/usr/sbin/ip"
NAME = re.compile(r"batchd-(\d+)-([0-9a-f]{6})")
SUBNET_LOCK = "/run/batchd-netns.lock"    # concurrent runs choose their /30 one at a time
HOST_MAC = "02:bd:00:00:00:01"             # locally administered unicast addresses; each veth pair
INSIDE_MAC = "02:bd:00:00:00:02"           # is a link of its own, so every pair can use the same
NOWHERE_MAC = "02:bd:00:00:00:00"          # on no interface: frames sent to it are dropped


def ip(*args, check=True) -> str:
    done = subprocess.run([IP, *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


class Partition:
    """A namespace with a veth link to the host, removed at exit with whatever runs inside."""

    def __init__(self):
        token = secrets.token_hex(3)
        self.name = f"batchd-{os.getpid()}-{token}"
        self.host_if, self.inside_if = host_interface(token), f"bd{token}i"
        self.host_ip = self.inside_ip = None
        self.procs = []

    def __enter__(self):
        remove_leftovers()
        try:
            self._create()
        except BaseException:
            self._remove()
            raise
        return self

    def __exit__(self, *exc_info):
        self._remove()

    def popen(self, args, env=None, **kwargs) -> Proc:
        """Run `args` inside, as procs.Proc runs them on the host (`ip netns exec` execs the
        command itself, so the Proc's pid is the command's and signals reach it)."""
        proc = Proc([IP, "netns", "exec", self.name, *args], env=env, **kwargs)
        self.procs.append(proc)
        return proc

    def cut(self) -> None:
        """Drop every packet both ways from now on, silently (see the module's docstring)."""
        self._address_neighbours(host_sees=NOWHERE_MAC, inside_sees=NOWHERE_MAC)

    def heal(self) -> None:
        """Deliver packets again: connections that outlived the cut resume."""
        self._address_neighbours(host_sees=INSIDE_MAC, inside_sees=HOST_MAC)

    def pids(self) -> list:
        """Every process inside, whoever started it (a daemon's children too)."""
        return pids_inside(self.name)

    def _create(self) -> None:
        ip("netns", "add", self.name)
        ip("-n", self.name, "link", "set", "lo", "up")
        with _subnet_lock():
            x = _free_subnet()
            self.host_ip, self.inside_ip = f"10.213.{x}.1", f"10.213.{x}.2"
            ip("link", "add", self.host_if, "address", HOST_MAC, "type", "veth",
               "peer", "name", self.inside_if, "address", INSIDE_MAC, "netns", self.name)
            ip("addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
        ip("-n", self.name, "addr", "add", f"{self.inside_ip}/30", "dev", self.inside_if)
        ip("link", "set", self.host_if, "up")
        ip("-n", self.name, "link", "set", self.inside_if, "up")
        self.heal()

    def _address_neighbours(self, host_sees: str, inside_sees: str) -> None:
        ip("neigh", "replace", self.inside_ip, "dev", self.host_if, "lladdr", host_sees, "nud", "permanent")
        ip("-n", self.name, "neigh", "replace", self.host_ip, "dev", self.inside_if,
           "lladdr", inside_sees, "nud", "permanent")

    def _remove(self) -> None:
        try:
            for proc in self.procs:
                proc.stop()
        finally:                         # what a Proc failed to stop, kill_inside kills
            remove_namespace(self.name, self.host_if)


def host_interface(token: str) -> str:
    return f"bd{token}h"


def remove_namespace(name: str, host_if: str) -> None:
    """Kill what runs inside, then remove the veth pair and the namespace; check that they are gone
    (a namespace outlives `ip netns del` as long as a process is in it)."""
    kill_inside(name)
    ip("link", "del", host_if, check=False)      # takes both ends; already gone is fine
    ip("netns", "del", name, check=False)
    left = [what for what, present in ((f"interface {host_if}", _interface_exists(host_if)),
                                       (f"namespace {name}", name in namespaces())) if present]
    if left:
        raise RuntimeError(f"netns: could not remove {', '.join(left)}")


def kill_inside(name: str) -> None:
    for pid in pids_inside(name):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not pids_inside(name), timeout=10, message=f"the processes in {name} to die")


def pids_inside(name: str) -> list:
    return [int(pid) for pid in ip("netns", "pids", name, check=False).split()]


def remove_leftovers() -> None:
    """Namespaces whose creator died before its `with` ended (a killed test run)."""
    for name in namespaces():
        found = NAME.fullmatch(name)
        if found and not _alive(int(found[1])):
            remove_namespace(name, host_interface(found[2]))


def namespaces() -> list:
    return [line.split()[0] for line in ip("netns", "list").splitlines() if line.strip()]


def _alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def _interface_exists(name: str) -> bool:
    return os.path.exists(f"/sys/class/net/{name}")


@contextlib.contextmanager
def _subnet_lock():
    with open(SUBNET_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _free_subnet() -> int:
    """x of a 10.213.x.0/30 no host address is in: another run's, or a leftover's."""
    used = set(re.findall(r"inet 10\.213\.(\d+)\.", ip("-4", "-o", "addr", "show")))
    free = [x for x in range(256) if str(x) not in used]
    if not free:
        raise RuntimeError("netns: every 10.213.x.0/30 is taken")
    return random.choice(free)
