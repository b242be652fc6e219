"""Self-test of tests/netns.py: a process inside a Partition reaches a private Redis, MariaDB and
TestSite on the host side's address; a cut makes an established Redis connection's command time
out (no reset) and a new connection impossible; after a heal the same process carries on, and a
command it sent during the cut is answered on its old connection, once. The shared servers stay
out of the namespace's reach and untouched throughout.

Run as a script, this file is the process inside (see `inside`).
"""
import json
import signal
import socket
import sys
import threading
import time

import pytest

from httpserver import TestSite
from netns import Partition
from servers import PrivateMariaDB, PrivateRedis

COMMAND_TIMEOUT = 1.0      # the socket timeout of the inside's Redis client, seconds
PATIENT_TIMEOUT = 60.0     # the client whose command waits out the cut
STEP = signal.SIGUSR1      # the test's word to the inside: "cut" and then "healed"
SHARED_REDIS = ("127.0.0.1", 6379)       # the machine's servers that every other test uses
SHARED_MARIADB = ("127.0.0.1", 3306)
IN_FLIGHT_KEY = "across-the-cut"


@pytest.mark.chaos
def test_a_cut_hangs_connections_silently_and_a_heal_resumes_them(capsys):
    shared_before = shared_server_marks()
    with Partition() as net, PrivateRedis(host=net.host_ip) as redis_server, \
            PrivateMariaDB(host=net.host_ip) as db, TestSite(host=net.host_ip) as site:
        config = {"redis": redis_server.url(0), "mariadb": [db.host, db.port], "page": site.url("/page/1")}
        inside_proc = net.popen([sys.executable, __file__, json.dumps(config)])
        connected = report(inside_proc, "connected")
        assert connected == {"phase": "connected", "redis": True, "mariadb": 1, "page": 200,
                             "shared_redis_reachable": False, "shared_mariadb_reachable": False}

        cut_at = time.monotonic()
        net.cut()
        inside_proc.send(STEP)
        cut = report(inside_proc, "cut")
        shared_during = shared_server_marks()          # the host's own traffic goes on

        healed_at = time.monotonic()
        net.heal()
        inside_proc.send(STEP)
        healed = report(inside_proc, "healed")
        assert inside_proc.wait(30) == 0, inside_proc.output()[-3000:]
        in_flight_count = stored_count(redis_server.url(0))
        page_hits = site.hits("/page/1")
    shared_after = shared_server_marks()

    answered_at = healed.pop("in_flight_answered_at")
    with capsys.disabled():
        resumed = f"{answered_at - healed_at:.3f} s after heal()" if answered_at else "never"
        print(f"\nnetns: cut for {healed_at - cut_at:.3f} s; an established Redis connection's command hung "
              f"{cut['command_hung']:.3f} s ({cut['command_error']} at its {COMMAND_TIMEOUT} s timeout); "
              f"a new connection hung {cut['connect_hung']:.3f} s ({cut['connect_error']}); the command "
              f"sent during the cut was answered {resumed}")

    # Hung until the client's own timeout: neither reset, nor refused, nor unreachable.
    assert cut["command_error"] == "TimeoutError" and cut["connect_error"] == "TimeoutError", cut
    for hung in (cut["command_hung"], cut["connect_hung"]):
        assert COMMAND_TIMEOUT * 0.9 <= hung < COMMAND_TIMEOUT * 3, cut
    assert cut["in_flight"] is None, "nothing crossed the cut"

    assert healed == {"phase": "healed", "in_flight": 1, "redis": True, "new_connection": True, "mariadb": 1,
                      "page": 200}
    assert answered_at >= healed_at, "the command sent during the cut was answered after the heal"
    assert in_flight_count == 1, "the command sent during the cut ran once"
    assert page_hits == 2

    assert_untouched(shared_before, shared_during)
    assert_untouched(shared_before, shared_after)


def report(proc, phase: str) -> dict:
    """The JSON line the inside printed at `phase` (waiting for it, failing fast if it died)."""
    start = json.dumps({"phase": phase})[:-1]
    proc.wait_output(start)
    return json.loads(next(line for line in proc.output().splitlines() if line.startswith(start)))


def stored_count(url: str) -> int:
    import redis
    return int(redis.Redis.from_url(url).get(IN_FLIGHT_KEY))


def shared_server_marks() -> dict:
    """What a restart or a new bind address of the shared servers would change."""
    import MySQLdb
    import redis
    client = redis.Redis(*SHARED_REDIS, socket_timeout=5)
    conn = MySQLdb.connect(host=SHARED_MARIADB[0], port=SHARED_MARIADB[1], user="root", connect_timeout=5)
    try:
        cursor = conn.cursor()
        cursor.execute("SELECT @@bind_address, @@port, VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS"
                       " WHERE VARIABLE_NAME = 'UPTIME'")
        bind_address, port, uptime = cursor.fetchone()
    finally:
        conn.close()
    return {"redis_run_id": client.info("server")["run_id"], "redis_bind": client.config_get("bind")["bind"],
            "mariadb_bind": (bind_address, port), "mariadb_uptime": int(uptime)}


def assert_untouched(before: dict, later: dict) -> None:
    assert {k: v for k, v in later.items() if k != "mariadb_uptime"} == \
        {k: v for k, v in before.items() if k != "mariadb_uptime"}
    assert later["mariadb_uptime"] >= before["mariadb_uptime"], "the shared MariaDB was not restarted"


# -- the process inside the namespace
def inside(config: dict) -> None:
    """Connect, then wait for the test's word at each step and print what it saw as a JSON line."""
    import MySQLdb
    signal.pthread_sigmask(signal.SIG_BLOCK, {STEP})   # a word that comes early waits for sigwait
    quick = redis_client(config["redis"], COMMAND_TIMEOUT)
    patient = redis_client(config["redis"], PATIENT_TIMEOUT)
    host, port = config["mariadb"]
    db = MySQLdb.connect(host=host, port=port, user="root", connect_timeout=5)
    print_report("connected", redis=quick.ping() and patient.ping(), mariadb=select_one(db),
                 page=fetch(config["page"]), shared_redis_reachable=reachable(*SHARED_REDIS),
                 shared_mariadb_reachable=reachable(*SHARED_MARIADB))

    signal.sigwait({STEP})
    in_flight = {}
    sender = threading.Thread(target=send_across_the_cut, args=(patient, in_flight))
    sender.start()
    command_error, command_hung = timed_failure(quick.ping)
    connect_error, connect_hung = timed_failure(redis_client(config["redis"], COMMAND_TIMEOUT).ping)
    print_report("cut", command_error=command_error, command_hung=command_hung, connect_error=connect_error,
                 connect_hung=connect_hung, in_flight=in_flight.get("value"))

    signal.sigwait({STEP})
    sender.join(PATIENT_TIMEOUT)
    print_report("healed", in_flight=in_flight.get("value"), in_flight_answered_at=in_flight.get("at"),
                 redis=quick.ping(), new_connection=redis_client(config["redis"], COMMAND_TIMEOUT).ping(),
                 mariadb=select_one(db), page=fetch(config["page"]))


def redis_client(url: str, timeout: float):
    """A client that reports a timeout at once: redis-py retries by default since 6.0."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry
    return redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout,
                                retry=Retry(NoBackoff(), 0))


def send_across_the_cut(client, in_flight: dict) -> None:
    """A command on an established connection, sent while the link is cut."""
    try:
        in_flight["value"] = client.incr(IN_FLIGHT_KEY)
    except Exception as exc:      # reported to the test, which fails on it
        in_flight["value"] = repr(exc)
    in_flight["at"] = time.monotonic()


def timed_failure(call) -> tuple:
    started = time.monotonic()
    try:
        call()
    except Exception as exc:
        return type(exc).__name__, time.monotonic() - started
    return None, time.monotonic() - started


def select_one(db) -> int:
    cursor = db.cursor()
    cursor.execute("SELECT 1")
    return cursor.fetchone()[0]


def fetch(url: str) -> int:
    import requests
    with requests.Session() as session:
        session.trust_env = False      # a proxy from the environment must not carry the request
        return session.get(url, timeout=10).status_code


def reachable(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=COMMAND_TIMEOUT).close()
        return True
    except OSError:
        return False


def print_report(phase: str, **figures) -> None:
    print(json.dumps({"phase": phase, **figures}), flush=True)


if __name__ == "__main__":
    inside(json.loads(sys.argv[1]))
