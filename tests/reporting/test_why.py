"""`batchd status --why`: a real `batchd run` on MySQL + Redis and on SQLite, one of its workers stopped
(SIGSTOP) or killed with its supervisor frozen, and the command naming the holders of the leases, their
state and age, the oldest tasks in flight, a paused namespace and a finished batch; and the port read
behind it (LeaseQueue.held_leases) on every backend."""
import json
import os
import signal
import socket

from batchd.service.systemd import counted
from harness import batch_done, wait_for
from supervised import DAEMON_SETTINGS, batchd, gated_urls, masters_of, slow_urls, start_batchd, workers_of
from backend_ports import LONG, opener, ports, pushed  # noqa: F401  (fixtures)
from dashboards import Web

STOPPED_STALE = 10      # BATCH_LOST_TASK_STALE: a stopped worker's leases count as stalled after 6 s unrenewed
DAEMON_STALE = DAEMON_SETTINGS["BATCH_LOST_TASK_STALE"]     # what start_batchd gives the daemon
DEAD_STALE = 40         # well past a snapshot's TTL (11 s): a dead worker's leases are still held when looked at, twice


def why(backend, stale=None) -> dict:
    """`batchd status --why --json`, under the daemon's BATCH_LOST_TASK_STALE (as one config serves both)."""
    result = batchd("status", "spiders/seed.py:CrawlTask", "--why", "--json", backend=backend, env=stale_env(stale))
    report = json.loads(result.stdout)
    assert result.returncode == (69 if report["unreachable"] else 0), result.stderr     # 69: a backend is down
    return report


def stale_env(stale) -> dict:
    return {"BATCHD_BATCH_LOST_TASK_STALE": str(stale)} if stale else {}


def why_text(backend, stale=None) -> str:
    result = batchd("status", "spiders/seed.py:CrawlTask", "--why", backend=backend, env=stale_env(stale))
    assert result.returncode == 0, result.stderr
    return result.stdout


def why_until(backend, stale, predicate, message: str, timeout: float = 30.0) -> dict:
    """The first `--why --json` report that `predicate` accepts; the last one seen in the failure."""
    seen: list = []

    def accepted():
        seen[:] = [why(backend, stale)]
        return predicate(seen[0])
    try:
        wait_for(accepted, timeout=timeout, message=message)
    except AssertionError as e:
        raise AssertionError(f"{e}; the last report: {json.dumps(seen[-1] if seen else None, indent=1)}") from None
    return seen[0]


def holder_of(report: dict, pid: int):
    return next((h for h in report["holders"] if h["pid"] == pid and h["host"] == socket.gethostname()), None)


def kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# -- the port
def test_held_leases_counts_holders_and_lists_the_longest_held_first(ports):  # noqa: F811
    queue = ports.leases
    pushed(queue, *range(1, 6))
    first = queue.lease("web1:12:ab:0", LONG)
    wait_for(lambda: queue.held_leases(5).oldest[0].held > 0.05, timeout=5, message="the first lease to age")
    later = [queue.lease(f"web1:12:ab:{n}", LONG) for n in (1, 2)] + [queue.lease("web2:7:cd:0", LONG)]
    queue.renew([first], LONG)                                  # a renewal keeps when it was taken
    view = queue.held_leases(2)
    assert view.holders.keys() == {"web1:12:ab:", "web2:7:cd:"}
    assert view.holders["web1:12:ab:"][0] == 3 and view.holders["web2:7:cd:"][0] == 1
    assert all(LONG - 5 < expires_in <= LONG for _, expires_in in view.holders.values())
    assert len(view.oldest) == 2 and view.oldest[0].key == first.key and view.oldest[0].token == first.token
    assert view.oldest[0].held >= view.oldest[1].held >= 0
    assert queue.give_back([later[-1]]) == 1 and queue.held_leases(5).holders["web2:7:cd:"][1] <= 0
    assert queue.release([first]) == [first]
    view = queue.held_leases(5)
    assert first.key not in {lease.key for lease in view.oldest} and len(view.oldest) == 3
    assert queue.pending_count() == 1 and queue.reclaim_expired(10) == [later[-1].key]
    assert {holder: count for holder, (count, _) in queue.held_leases(5).holders.items()} == {"web1:12:ab:": 2}


# -- the command, on a real `batchd run`
def test_why_names_a_stopped_worker_its_leases_and_the_oldest_tasks(shared_backend, site, procs):
    shared_backend.create_tasks(slow_urls(site, 40, seconds=20))
    proc = start_batchd(procs, shared_backend, "run", "--workers", "2", CHILD_TIMEOUT=120,
                        BATCH_LOST_TASK_STALE=STOPPED_STALE)
    wait_for(lambda: len(workers_of(proc.pid)) == 2, message="two workers")
    frozen, master = workers_of(proc.pid)[0], masters_of(proc.pid)[0]
    try:
        why_until(shared_backend, STOPPED_STALE, lambda r: (holder_of(r, frozen) or {}).get("state") == "live",
                  "the worker to hold leases")
        # The master is stopped too: nothing requeues the stopped worker's leases once they are due, so the reports
        # below (a `batchd status` each, up to 5 s at a load of 20 on two CPUs) all find them held, stalled and due.
        os.kill(frozen, signal.SIGSTOP)
        os.kill(master, signal.SIGSTOP)
        report = why_until(shared_backend, STOPPED_STALE,
                           lambda r: (holder_of(r, frozen) or {}).get("state") == "stalled"
                           and holder_of(r, frozen)["expires_in"] <= 0,
                           "its leases to go unrenewed past their deadline", timeout=STOPPED_STALE + 30)
        held = holder_of(report, frozen)
        assert held["leases"] > 0 and held["expires_in"] <= 0 and held["worker"]
        assert report["tasks"]["leased_stalled"] == held["leases"]
        assert report["tasks"]["leased"] >= report["tasks"]["leased_live"] + held["leases"]
        assert report["tasks"]["total"] == 40 and report["tasks"]["pending"] + report["tasks"]["queued"] \
            + report["tasks"]["leased"] + report["tasks"]["settled"] == 40
        assert report["verdict"].startswith(f"waiting on {counted(held['leases'], 'task')} held by a stalled worker")
        assert f"pid {frozen}" in report["verdict"] and report["verdict"].endswith(
            "their leases are due: the master requeues them at its next patrol")
        oldest = report["oldest"]
        assert oldest and all(task["held_seconds"] >= 4 for task in oldest)      # held since before the stop
        assert [t["held_seconds"] for t in oldest] == sorted((t["held_seconds"] for t in oldest), reverse=True)
        assert all(task["host"] == socket.gethostname() and task["state"] in ("live", "stalled") for task in oldest)
        text = why_text(shared_backend, STOPPED_STALE)
        assert f"stalled  {socket.gethostname()} pid {frozen}" in text and "oldest in flight:" in text
        assert "verdict  waiting on" in text and "held by a stalled worker" in text
    finally:
        kill_quietly(frozen)
        kill_quietly(master)


def test_why_names_the_leases_of_a_dead_worker_whose_supervisor_is_gone(shared_backend, site, procs):
    shared_backend.create_tasks(slow_urls(site, 40, seconds=30))
    proc = start_batchd(procs, shared_backend, "run", "--workers", "1", BATCH_LOST_TASK_STALE=DEAD_STALE)
    wait_for(lambda: len(workers_of(proc.pid)) == 1, message="a worker")
    worker = workers_of(proc.pid)[0]
    why_until(shared_backend, DEAD_STALE, lambda r: (holder_of(r, worker) or {}).get("state") == "live",
              "the worker to hold leases")
    proc.send(signal.SIGSTOP)           # its supervisor neither gives the leases back nor publishes again
    try:
        os.kill(worker, signal.SIGKILL)
        report = why_until(shared_backend, DEAD_STALE, lambda r: (holder_of(r, worker) or {}).get("state") == "dead",
                           "the supervisor's snapshot to expire", timeout=40)
        held = holder_of(report, worker)
        assert held["leases"] > 0 and held["worker"] is None and 0 < held["expires_in"] <= DEAD_STALE - 12
        assert report["tasks"]["leased_dead"] == held["leases"] and report["workers_alive"] == 0
        assert report["verdict"].startswith(f"waiting on {counted(held['leases'], 'task')} held by a dead worker (pid {worker}) "
                                            f"on host {socket.gethostname()}: their leases expire in ")
        assert all(task["state"] == "dead" and task["pid"] == worker for task in report["oldest"])
        assert "dead     " in why_text(shared_backend, DEAD_STALE)
    finally:
        proc.send(signal.SIGKILL)


def test_why_says_paused_and_finished(shared_backend, site, procs):
    # Gated pages (tests/httpserver.py): the batch cannot finish before the pause, however long a command takes.
    shared_backend.create_tasks(gated_urls(site, 12))
    proc = start_batchd(procs, shared_backend, "run", "--workers", "1", SPIDER_THREAD_COUNT=2)
    wait_for(lambda: site.held() == 2, message="two tasks at the gate")
    assert batchd("pause", "spiders/seed.py:CrawlTask", backend=shared_backend).returncode == 0
    report = why(shared_backend)
    assert report["batch"] and not report["batch"]["is_done"]
    assert report["paused_since"] and report["verdict"].startswith("paused since ")
    assert "nothing is leased until `batchd resume`" in why_text(shared_backend)
    assert batchd("resume", "spiders/seed.py:CrawlTask", backend=shared_backend).returncode == 0
    site.gate.set()
    wait_for(lambda: batch_done(shared_backend), message="the batch to finish")
    report = why(shared_backend)
    assert report["batch"]["is_done"] and report["next_due"]
    assert report["verdict"] == f"batch {report['batch']['id']} is finished: the next is due {report['next_due']}"
    proc.send(signal.SIGTERM)
    assert proc.wait(30) == 0, proc.output()


def test_why_says_no_worker_is_alive_when_the_master_runs_alone(shared_backend, site, procs):
    shared_backend.create_tasks(slow_urls(site, 6, seconds=1))
    proc = start_batchd(procs, shared_backend, "run", "--workers", "0")
    report = why_until(shared_backend, None, lambda r: r["batch"] and r["tasks"] and r["tasks"]["queued"],
                       message="the batch open, its tasks queued")
    assert report["workers_alive"] == 0 and report["verdict"] == "the workers are idle: none alive"
    assert "verdict  the workers are idle: none alive" in why_text(shared_backend)
    proc.send(signal.SIGTERM)
    assert proc.wait(30) == 0, proc.output()


def test_why_names_the_host_a_paced_batch_waits_on(shared_backend, site, procs):
    """One host held to a task a second: most tasks in hand are set aside for its turn, and the verdict says so,
    in the command and on the dashboard."""
    shared_backend.create_tasks([site.url(f"/page/{n}") for n in range(1, 41)])
    proc = start_batchd(procs, shared_backend, "run", "--workers", "1", SPIDER_THREAD_COUNT=8, DOMAIN_RATE_LIMIT=1)
    report = why_until(shared_backend, DAEMON_STALE, lambda r: "wait on their hosts' turn" in r.get("verdict", ""),
                       message="the verdict naming the host's turn")
    host = site.url("/")[len("http://"):-1]
    assert report["waiting_on_hosts"][0]["host"] == host and f"most on {host}" in report["verdict"]
    web = Web(procs, shared_backend, spider="spiders/seed.py:CrawlTask", DOMAIN_RATE_LIMIT=1)
    wait_for(lambda: "wait on their hosts' turn" in web.api("why")["verdict"], timeout=30,
             message="the dashboard's verdict")
    page = web.get(f"/ns/{report['namespace']}/").text
    assert "wait on their hosts&#x27; turn" in page and f"Set aside, waiting on their host: {host}" in page
    proc.send(signal.SIGTERM)
    assert proc.wait(30) == 0, proc.output()


def test_why_names_the_outage_the_workers_wait_out(private_mysql, site, procs):
    """MySQL down mid-batch: the verdict, from the supervisors' snapshots in Redis, is the outage, in the command
    and on the dashboard (which says what it cannot read)."""
    db, backend = private_mysql
    # Two gated pages at the end, let go once MySQL is down: the batch cannot finish before the outage, and
    # their write-backs meet it.
    backend.create_tasks(slow_urls(site, 30, seconds=0.3) + gated_urls(site, 2))
    proc = start_batchd(procs, backend, "run", "--workers", "1")
    web = Web(procs, backend, spider="spiders/seed.py:CrawlTask")
    why_until(backend, DAEMON_STALE, lambda r: r["tasks"] and r["tasks"]["settled"] > 0,
              message="the batch under way")
    backend.conn.close()
    db.stop()
    site.gate.set()
    report = why_until(backend, DAEMON_STALE, lambda r: r["verdict"].startswith("the workers wait for MySQL since "),
                       message="the verdict naming the outage")
    assert report["outages"] and report["outages"][0]["backend"] == "MySQL" and report["unreachable"]
    wait_for(lambda: web.api("why")["verdict"].startswith("the workers wait for MySQL since "), timeout=30,
             message="the dashboard's verdict")
    page = web.get(f"/ns/{report['namespace']}/").text
    assert "MISSING" in page and "waits for MySQL since" in page
    db.start()
    backend.reconnect()
    wait_for(lambda: batch_done(backend), timeout=60, message="the batch finished once MySQL is back")
    proc.send(signal.SIGTERM)
    assert proc.wait(30) == 0, proc.output()
