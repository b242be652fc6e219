"""The Debian package: built from this tree, checked by lintian, then installed and run as
services under a real systemd (tests/sdbox.sh) against the host's MariaDB and Redis.

The box shares the host's network, so the services reach MariaDB, Redis and the test site
on 127.0.0.1. Timings are shortened by the box's config file and unit drop-ins (as an
operator would), never by the shipped files.
"""
import json
import os
import re
import shutil
import subprocess
import time
import uuid

import pytest

import batchd
from batchd.task import TaskState
from harness import wait_for
from procs import HERE, ROOT
from supervised import free_port, try_scrape, value
from taskdb import MysqlBackend

pytestmark = pytest.mark.once

SDBOX = os.path.join(ROOT, "tests", "sdbox.sh")
# dpkg-buildpackage must find Debian's python3 and tools, not a pyenv or venv in front of them.
BUILD_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": os.environ.get("HOME", "/root"),
             "LANG": "C.UTF-8"}
REDIS_URL = os.environ.get("TEST_PACKAGE_REDIS_URL", "redis://127.0.0.1:6379/11")

RUNTIME_DEPENDS = {"python3-redis", "python3-mysqldb", "python3-parsel", "python3-requests",
                   "python3-sdnotify", "python3-setproctitle", "python3-systemd", "python3-w3lib", "python3-protego"}
# Only `--daemon` (hosts without systemd) uses python3-daemon, only METRICS_PORT prometheus-client.
RECOMMENDS = {"python3-daemon", "python3-prometheus-client", "chromium", "chromium-driver", "python3-selenium"}

TASKS = 300
PAUSE = 0.5          # seconds the test spider spends on each page: the batch lasts ~30 s
WATCHDOG_SEC = 14     # 2 x (CHILD_TIMEOUT 2 s + the supervisor's kill grace 5 s)
STOP_TIMEOUT_SEC = 20


def package_version() -> str:
    return subprocess.run(["dpkg-parsechangelog", "-S", "Version"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_versions_in_step():
    assert package_version().rsplit("-", 1)[0] == batchd.__version__


class Built:
    def __init__(self, top):
        version = package_version()
        arch = subprocess.run(["dpkg", "--print-architecture"], check=True, capture_output=True,
                              text=True).stdout.strip()
        self.deb = top / f"batchd_{version}_all.deb"
        self.changes = top / f"batchd_{version}_{arch}.changes"

    def field(self, name):
        return subprocess.run(["dpkg-deb", "--field", str(self.deb), name], check=True,
                              capture_output=True, text=True).stdout.strip()

    def packages(self, field) -> set:
        """The packages a relationship field names, alternatives included."""
        return {alternative.split()[0] for part in self.field(field).split(",") if part.strip()
                for alternative in part.split("|")}

    def files(self):
        listing = subprocess.run(["dpkg-deb", "--contents", str(self.deb)], check=True,
                                 capture_output=True, text=True).stdout
        return {line.split()[5].lstrip(".") for line in listing.splitlines()}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """`dpkg-buildpackage -us -uc -b` on a copy of the tree: the build writes its results
    into the parent directory and its byproducts into the tree, neither of which may be the
    repository's."""
    top = tmp_path_factory.mktemp("deb")
    src = top / "batchd"
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if os.path.isfile(os.path.join(ROOT, name)):   # a tracked file deleted in the tree is gone
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(os.path.join(ROOT, name), src / name)
    build = subprocess.run(["dpkg-buildpackage", "-us", "-uc", "-b"], cwd=src, env=BUILD_ENV,
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-4000:]
    result = Built(top)
    assert result.deb.is_file() and result.changes.is_file(), sorted(os.listdir(top))
    return result


def test_package_depends_on_debians_libraries(built):
    depends = built.packages("Depends")
    assert RUNTIME_DEPENDS <= depends and not RECOMMENDS & depends
    assert built.packages("Recommends") == RECOMMENDS
    assert built.field("Architecture") == "all"


def test_package_contents(built):
    files = built.files()
    for path in ("/usr/bin/batchd", "/lib/systemd/system/batchd-master.service",
                 "/lib/systemd/system/batchd-master@.service", "/lib/systemd/system/batchd-worker@.service",
                 "/lib/systemd/system/batchd-web.service",
                 "/etc/batchd/batchd.toml", "/etc/batchd/spiders/example.py", "/usr/lib/sysusers.d/batchd.conf",
                 "/usr/share/man/man1/batchd.1.gz", "/usr/share/man/man5/batchd.toml.5.gz",
                 "/usr/share/batchd/grafana/batchd.json"):
        assert path in files, path
    # The Redis ports' Lua scripts are package data, read where the package is installed.
    lua = os.path.join("batchd", "backends", "mysql_redis", "lua")
    for name in os.listdir(os.path.join(ROOT, lua)):
        assert f"/usr/lib/python3/dist-packages/{lua}/{name}" in files, name
    # Only batchd itself in dist-packages: its libraries come from Debian's packages.
    top_level = {p.split("/")[5] for p in files
                 if p.startswith("/usr/lib/python3/dist-packages/") and p.count("/") > 5}
    assert top_level == {"batchd", f"batchd-{batchd.__version__}.dist-info"}
    control = subprocess.run(["dpkg-deb", "--info", str(built.deb), "conffiles"], check=True,
                             capture_output=True, text=True).stdout.split()
    assert control == ["/etc/batchd/batchd.toml", "/etc/batchd/spiders/example.py"]


def test_lintian_reports_no_error_or_warning(built):
    result = subprocess.run(["lintian", "--display-info", "--pedantic", str(built.deb),
                             str(built.changes)], env=BUILD_ENV, capture_output=True, text=True, timeout=300)
    complaints = [line for line in result.stdout.splitlines() if line.startswith(("E:", "W:"))]
    assert result.returncode == 0 and complaints == [], result.stdout + result.stderr


# -- under systemd ------------------------------------------------------------------------

SPIDER = f'''
import time

import batchd


class PacedSpider(batchd.BatchSpider):
    __task_table__ = "crawl_task"

    def task_requests(self, task):
        yield batchd.Request(task["url"], callback=self.parse)

    def parse(self, request, response, task):
        time.sleep({PAUSE})   # a slow site: the batch outlasts what the test does to the services
        # Where this worker would dump items the database refuses: shows what it made of
        # FAILED_ITEMS_PATH (unset) under systemd.
        yield {{"url": task["url"], "title": response.css("h1::text").get(),
               "failed_items": self.settings.failed_items_path()}}
        self.update_task(task["id"], ok=True)
'''

# Short timings, as an operator would set them: WatchdogSec >= 2 x (CHILD_TIMEOUT + kill
# grace) and TimeoutStopSec > STOP_TIMEOUT, the rules batchd.toml documents.
DROP_IN = f"""[Service]
WatchdogSec={WATCHDOG_SEC}s
RestartSec=1s
TimeoutStopSec={STOP_TIMEOUT_SEC}s
"""


def box_config(backend) -> str:
    return f'''MYSQL_URL = "{backend.mysql_url}"
REDIS_URL = "{backend.redis_url}"
SPIDER = "/etc/batchd/spiders/paced.py:PacedSpider"
WORKERS = 2
SPIDER_THREAD_COUNT = 2
BATCH_MONITOR_INTERVAL = 0.5
BATCH_LOST_TASK_STALE = 5.0
ITEM_FLUSH_INTERVAL = 0.2
MASTER_LOCK_TIMEOUT = 5.0
CHILD_TIMEOUT = 2.0
STOP_TIMEOUT = 10.0
STATUS_INTERVAL = 1.0
'''


class Box:
    def __init__(self, name):
        self.name = name

    def run(self, *command, input=None, check=True, timeout=120):
        result = subprocess.run([SDBOX, "run", self.name, *command], input=input, capture_output=True,
                                text=True, timeout=timeout)
        if check:
            assert result.returncode == 0, f"{command}: exit {result.returncode}\n{result.stdout}\n{result.stderr}"
        return result

    def sh(self, script, **kwargs):
        return self.run("sh", "-ec", script, **kwargs)

    def write(self, path, text, mode="0644", owner="root:root"):
        self.sh(f'cat > "{path}" && chown {owner} "{path}" && chmod {mode} "{path}"', input=text)

    def show(self, unit) -> dict:
        out = self.run("systemctl", "show", unit, "-p", "MainPID,NRestarts,ActiveState,ExecMainStatus").stdout
        return dict(line.split("=", 1) for line in out.splitlines())

    def journal(self, unit, after=None) -> str:
        """The unit's journal (its own lines and systemd's about it), or only what follows a cursor()."""
        since = [f"--after-cursor={after}"] if after else []
        return self.run("journalctl", "--no-pager", "-o", "cat", "-u", unit, *since).stdout

    def cursor(self) -> str:
        out = self.run("journalctl", "--no-pager", "--show-cursor", "-n", "0").stdout
        return out.strip().rsplit("-- cursor: ", 1)[1]

    def stopped_cleanly(self, unit, after) -> bool:
        """systemd's verdict on a stop: the main process exited 0 before TimeoutStopSec. (An
        inactive instance is unloaded at once, so `systemctl show` no longer knows.)"""
        said = self.journal(unit, after)
        return ("Deactivated successfully" in said
                and not any(bad in said for bad in ("Main process exited", "Failed with result", "timed out")))

    def unit_processes(self, unit) -> list:
        """(pid, user, args) of every process in the unit's cgroup."""
        script = (f'for pid in $(cat "/sys/fs/cgroup$(systemctl show -P ControlGroup {unit})/cgroup.procs"); do '
                  'ps -o pid=,user=,args= -p "$pid" || true; done')
        return [tuple(line.split(None, 2)) for line in self.sh(script).stdout.splitlines()]

    def worker_children(self, unit) -> set:
        """Pids of the worker processes a worker unit's supervisor runs (by their process titles)."""
        return {pid for pid, _, args in self.unit_processes(unit) if re.match(r"batchd: worker \d+", args)}


@pytest.fixture
def redis_url():
    import redis
    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    yield REDIS_URL
    client.flushdb()
    client.close()


@pytest.fixture
def box():
    name = f"batchd-e2e-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    up = subprocess.run([SDBOX, "up", name], capture_output=True, text=True, timeout=120)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        yield Box(name)
    finally:
        subprocess.run([SDBOX, "down", name], capture_output=True, timeout=120)


def progress(backend):
    """(settled, total) straight from the task table."""
    counts = dict(backend.sql("SELECT `batch_status`, COUNT(*) FROM `crawl_task` GROUP BY `batch_status`"))
    return counts.get(TaskState.DONE, 0) + counts.get(TaskState.FAILED, 0), sum(counts.values())


def install_deb(built, box) -> None:
    """The built package into the box, installed by apt-get as an administrator would."""
    with open(built.deb, "rb") as f:
        subprocess.run([SDBOX, "run", box.name, "sh", "-c", "cat > /root/batchd.deb"], stdin=f, check=True)
    box.run("apt-get", "install", "-y", "/root/batchd.deb", timeout=300)


def restarted(box, unit, old_pid, restarts):
    state = box.show(unit)
    return (state["ActiveState"] == "active" and state["MainPID"] not in ("0", old_pid)
            and int(state["NRestarts"]) == restarts + 1)


@pytest.fixture
def box_backend(box, mysql_url, redis_url, tmp_path):
    """The test's database and Redis namespace as the services in the box reach them; the services'
    journal is printed at the end (pytest shows it when the test fails)."""
    backend = MysqlBackend(mysql_url, redis_url, str(tmp_path / "unused.jsonl"))
    try:
        yield backend
    finally:
        print(box.run("journalctl", "--no-pager", "-u", "batchd-*", check=False).stdout[-20000:])
        backend.conn.close()


def test_services_run_a_batch_under_systemd(built, box, site, box_backend):
    check_service_lifecycle(built, box, site, box_backend)


def check_service_lifecycle(built, box, site, backend):
    # -- install: the user, the config's mode, nothing started
    install_deb(built, box)
    user = box.run("getent", "passwd", "batchd").stdout.strip().split(":")
    assert int(user[2]) < 1000 and user[6] == "/usr/sbin/nologin", user
    assert box.run("stat", "-c", "%a %U %G", "/etc/batchd/batchd.toml").stdout.split() == ["640", "root", "batchd"]
    assert box.run("systemctl", "is-enabled", "batchd-master", check=False).stdout.strip() == "disabled"
    assert box.run("systemctl", "is-active", "batchd-master", check=False).stdout.strip() == "inactive"
    # Installed, with their man page and executable: verify has nothing to say.
    verify = box.run("systemd-analyze", "verify", "batchd-master.service", "batchd-master@news.service",
                     "batchd-worker@1.service", "batchd-web.service")
    assert verify.stderr == ""
    # batchd.toml(5), generated at build time, renders as lintian reads it: no warning from man.
    page = box.sh("MANWIDTH=80 man --warnings -E UTF-8 batchd.toml 2>/tmp/warnings; cat /tmp/warnings >&2")
    assert page.stderr == "" and "BATCHD_NAME=value" in page.stdout and "DOWNLOAD_TIMEOUT" in page.stdout, page
    # /usr/bin/batchd is Debian's python3 with Debian's libraries.
    assert box.run("head", "-n1", "/usr/bin/batchd").stdout.strip() == "#!/usr/bin/python3"
    assert batchd.__version__ in box.run("batchd", "--version").stdout
    where = box.run("/usr/bin/python3", "-c", "import batchd, redis, MySQLdb, parsel, requests, sdnotify, daemon;"
                    "print(*(m.__file__ for m in (batchd, redis, MySQLdb, parsel, requests, sdnotify, daemon)))")
    assert all(p.startswith("/usr/lib/python3/dist-packages/") for p in where.stdout.split()), where.stdout

    # -- configure, as the README tells an operator
    urls = [site.url(f"/page/{n}") for n in range(1, TASKS + 1)]
    backend.create_tasks(urls)
    box.write("/etc/batchd/batchd.toml", box_config(backend))          # keeps 0640 root:batchd
    box.write("/etc/batchd/worker-2.toml", "WORKERS = 1\n", mode="0640", owner="root:batchd")
    box.write("/etc/batchd/spiders/paced.py", SPIDER)
    for unit in ("batchd-master.service", "batchd-worker@.service"):
        box.sh(f"mkdir -p /etc/systemd/system/{unit}.d")
        box.write(f"/etc/systemd/system/{unit}.d/test-timings.conf", DROP_IN)
    box.run("systemctl", "daemon-reload")

    # -- a configuration error (exit 78) stops an instance instead of restarting it
    box.write("/etc/batchd/worker-broken.toml", 'SPIDER = "/etc/batchd/spiders/missing.py:Nothing"\n',
              mode="0640", owner="root:batchd")
    assert box.run("systemctl", "start", "batchd-worker@broken", check=False, timeout=60).returncode != 0
    state = box.show("batchd-worker@broken")
    assert (state["ActiveState"], state["ExecMainStatus"], state["NRestarts"]) == ("failed", "78", "0"), state

    started = time.monotonic()
    box.run("systemctl", "start", "batchd-master", "batchd-worker@1", "batchd-worker@2")
    units = ("batchd-master", "batchd-worker@1", "batchd-worker@2")

    # -- they run as batchd; the instance reads its own file (worker-2.toml: one worker)
    wait_for(lambda: len(box.worker_children("batchd-worker@1")) == 2
             and len(box.worker_children("batchd-worker@2")) == 1,
             timeout=20, message="2 workers in batchd-worker@1 and 1 in batchd-worker@2")
    for unit in units:
        processes = box.unit_processes(unit)
        assert processes and {user for _, user, _ in processes} == {"batchd"}, (unit, processes)

    wait_for(lambda: progress(backend)[0] >= TASKS // 20, timeout=60, message="5% of the batch settled")

    # -- a warm stop mid-batch drains within TimeoutStopSec and exits 0
    cursor, stopping = box.cursor(), time.monotonic()
    box.run("systemctl", "stop", "batchd-worker@2", timeout=STOP_TIMEOUT_SEC + 30)
    drain_seconds = time.monotonic() - stopping
    assert drain_seconds < STOP_TIMEOUT_SEC, drain_seconds
    assert box.stopped_cleanly("batchd-worker@2", cursor), box.journal("batchd-worker@2", cursor)
    box.run("systemctl", "start", "batchd-worker@2")

    # -- SIGKILL of a worker unit's main process: systemd starts it again
    before = box.show("batchd-worker@1")
    box.run("systemctl", "kill", "--kill-whom=main", "--signal=KILL", "batchd-worker@1")
    wait_for(lambda: restarted(box, "batchd-worker@1", before["MainPID"], int(before["NRestarts"])),
             timeout=20, message="batchd-worker@1 restarted after SIGKILL")

    # -- systemctl reload: the same supervisor replaces its children
    before, old_children = box.show("batchd-worker@1"), box.worker_children("batchd-worker@1")
    box.run("systemctl", "reload", "batchd-worker@1")
    wait_for(lambda: len(box.worker_children("batchd-worker@1") - old_children) == 2
             and not box.worker_children("batchd-worker@1") & old_children,
             timeout=30, message="batchd-worker@1's workers replaced after a reload")
    after = box.show("batchd-worker@1")
    assert (after["MainPID"], after["ActiveState"]) == (before["MainPID"], "active")

    # -- a hung supervisor stops pinging: the watchdog kills it and systemd restarts it
    before = box.show("batchd-master")
    box.run("systemctl", "kill", "--kill-whom=main", "--signal=STOP", "batchd-master")
    wait_for(lambda: restarted(box, "batchd-master", before["MainPID"], int(before["NRestarts"])),
             timeout=WATCHDOG_SEC + 20, message="batchd-master restarted by the watchdog")
    master_journal = box.journal("batchd-master")
    assert "Watchdog timeout" in master_journal and "Failed with result 'watchdog'" in master_journal

    # -- the batch completes: every task done, its item stored
    wait_for(lambda: progress(backend) == (TASKS, TASKS) and backend.records()[-1]["is_done"],
             timeout=150, interval=0.5, message=f"the batch of {TASKS} tasks to finish")
    batch_seconds = time.monotonic() - started
    assert set(backend.states().values()) == {TaskState.DONE}
    items = backend.items()
    assert sorted((item["url"], item["title"]) for item in items) == \
        sorted((site.url(f"/page/{n}"), f"Title {n}") for n in range(1, TASKS + 1))
    # failed_items.jsonl goes to the units' state directory (systemd's STATE_DIRECTORY)
    assert {item["failed_items"] for item in items} == {"/var/lib/batchd/failed_items.jsonl"}
    print(f"batch of {TASKS} tasks done in {batch_seconds:.1f} s; warm stop of a worker unit {drain_seconds:.1f} s")

    check_dashboard(box)

    # -- what the operator reads
    assert "批次进度" in box.journal("batchd-master")
    for unit in units:
        status = box.run("systemctl", "status", "--no-pager", unit, check=False).stdout
        line = re.search(r'^\s+Status: ".+"$', status, re.MULTILINE)
        assert line, status
        print(f"{unit}: {line.group(0).strip()}")

    check_operator_commands(box, backend)

    # -- systemctl stop: every unit drains and exits 0 within TimeoutStopSec
    cursor, stopping = box.cursor(), time.monotonic()
    box.run("systemctl", "stop", *units, timeout=STOP_TIMEOUT_SEC + 30)
    assert time.monotonic() - stopping < STOP_TIMEOUT_SEC
    for unit in units:
        assert box.stopped_cleanly(unit, cursor), box.journal(unit, cursor)

    # -- remove stops running services and keeps the config; purge takes config and state
    box.run("systemctl", "start", *units)
    box.run("apt-get", "remove", "-y", "batchd", timeout=300)
    assert box.run("pgrep", "-u", "batchd", check=False).stdout == ""
    assert box.run("test", "-f", "/etc/batchd/batchd.toml", check=False).returncode == 0
    assert box.run("test", "-d", "/var/lib/batchd", check=False).returncode == 0
    box.run("apt-get", "purge", "-y", "batchd", timeout=300)
    for path in ("/etc/batchd/batchd.toml", "/var/lib/batchd"):
        assert box.run("test", "-e", path, check=False).returncode != 0, path
    assert box.run("dpkg-statoverride", "--list", "/etc/batchd/batchd.toml", check=False).stdout == ""


def check_dashboard(box) -> None:
    """batchd-web.service, hardened, serves the finished batch's figures on the box's loopback; a stop ends it
    with 0."""
    box.run("systemctl", "start", "batchd-web", timeout=60)
    fetch = ("import json, urllib.request; tasks = json.load(urllib.request.urlopen("
             "'http://127.0.0.1:9380/api/status', timeout=5))['tasks']; print(tasks['done'], tasks['total'])")
    assert box.run("python3", "-c", fetch).stdout.split() == [str(TASKS), str(TASKS)]
    assert {user for _, user, _ in box.unit_processes("batchd-web")} == {"batchd"}
    cursor = box.cursor()
    box.run("systemctl", "stop", "batchd-web", timeout=30)
    assert box.show("batchd-web")["ExecMainStatus"] == "0", box.journal("batchd-web", cursor)


def unit_status(box, unit) -> str:
    """The unit's STATUS= line, as `systemctl status` shows it (not the journal lines under it)."""
    status = box.run("systemctl", "show", "-P", "StatusText", unit, check=False).stdout
    return status.strip()


def check_operator_commands(box, backend) -> None:
    """batchd pause / resume / open-batch as root in the box, with the installed package's config."""
    paused = box.run("batchd", "pause")
    assert "paused" in paused.stdout, paused
    wait_for(lambda: "paused since" in unit_status(box, "batchd-master"), timeout=20,
             message="systemctl status batchd-master says paused")
    assert "PAUSED   since" in box.run("batchd", "status").stdout
    assert "paused since" in box.journal("batchd-master")
    assert "resumed" in box.run("batchd", "resume").stdout
    wait_for(lambda: "paused since" not in unit_status(box, "batchd-master"), timeout=20,
             message="the pause gone from systemctl status")
    opened = box.run("batchd", "open-batch", timeout=90)
    assert "batch 2 opened" in opened.stdout, opened
    wait_for(lambda: len(backend.records()) == 2 and backend.records()[-1]["is_done"], timeout=150, interval=0.5,
             message="batch 2, opened by batchd open-batch, to finish")
    assert set(backend.states().values()) == {TaskState.DONE}
    assert "batch 2 (closed): 0 failed tasks" in box.run("batchd", "failed").stdout
    assert "is closed" in box.run("batchd", "requeue", "--failed").stdout


# -- several spiders on one host: batchd-master@NAME ------------------------------------

def enable_links(box) -> list:
    """The batchd links `systemctl enable` left under /etc/systemd/system."""
    return box.sh("ls /etc/systemd/system/*.wants/ | grep '^batchd' || true").stdout.split()


def test_a_spider_runs_under_its_own_master_instance_and_purge_forgets_enabled_units(built, box, site, box_backend):
    """docs/operating.md's "two spiders side by side", one of them: batchd.toml names no usable spider, the
    instances' files do. batchd-master@paced and batchd-worker@paced-1 run the batch; the master
    instance reloads from master-paced.toml; purge removes every enable link, and the package
    installs again cleanly."""
    check_spider_instances(built, box, site, box_backend)


def check_spider_instances(built, box, site, backend):
    install_deb(built, box)
    tasks = 40
    backend.create_tasks([site.url(f"/page/{n}") for n in range(1, tasks + 1)])
    config = box_config(backend).replace("/etc/batchd/spiders/paced.py:PacedSpider",
                                         "/etc/batchd/spiders/absent.py:NoSpider")
    box.write("/etc/batchd/batchd.toml", config)
    box.write("/etc/batchd/spiders/paced.py", SPIDER)
    spider_line = 'SPIDER = "/etc/batchd/spiders/paced.py:PacedSpider"\n'
    for name in ("master-paced.toml", "worker-paced-1.toml"):
        box.write(f"/etc/batchd/{name}", spider_line)
    units = ("batchd-master@paced", "batchd-worker@paced-1")
    box.run("systemctl", "enable", "--now", *units)
    wait_for(lambda: progress(backend) == (tasks, tasks) and backend.records()[-1]["is_done"],
             timeout=90, interval=0.5, message=f"the batch of {tasks} tasks to finish")
    assert set(backend.states().values()) == {TaskState.DONE}
    assert "批次进度" in box.journal("batchd-master@paced")
    master = box.unit_processes("batchd-master@paced")
    assert {user for _, user, _ in master} == {"batchd"}
    assert any(args.startswith("batchd: master crawl_task@paced") for _, _, args in master), master

    # systemctl reload checks master-paced.toml (ExecReload= --role master), not worker-paced.toml
    before = box.show("batchd-master@paced")
    box.write("/etc/batchd/master-paced.toml", spider_line + "WORKES = 2\n")
    refused = box.run("systemctl", "reload", "batchd-master@paced", check=False)
    assert refused.returncode != 0
    status = box.run("systemctl", "status", "--no-pager", "--full", "-n", "20", "batchd-master@paced",
                     check=False).stdout
    assert "unknown setting 'WORKES' in /etc/batchd/master-paced.toml" in status, status
    box.write("/etc/batchd/master-paced.toml", spider_line)
    box.run("systemctl", "reload", "batchd-master@paced")
    after = box.show("batchd-master@paced")
    assert (after["MainPID"], after["ActiveState"]) == (before["MainPID"], "active")

    # purge: the links of every enabled unit and instance go, with the package's files and state
    box.run("systemctl", "enable", "batchd-master", "batchd-worker@3")
    assert sorted(enable_links(box)) == ["batchd-master.service", "batchd-master@paced.service",
                                         "batchd-worker@3.service", "batchd-worker@paced-1.service"]
    box.run("apt-get", "purge", "-y", "batchd", timeout=300)
    assert box.run("pgrep", "-u", "batchd", check=False).stdout == ""
    assert enable_links(box) == []
    for path in ("/etc/batchd/batchd.toml", "/var/lib/batchd", "/lib/systemd/system/batchd-master@.service"):
        assert box.run("test", "-e", path, check=False).returncode != 0, path
    # ... and it installs again as on a fresh machine: nothing enabled, the config's mode restored
    install_deb(built, box)
    for unit in ("batchd-master", "batchd-master@paced", "batchd-worker@3"):
        assert box.run("systemctl", "is-enabled", unit, check=False).stdout.strip() == "disabled", unit
    assert box.run("stat", "-c", "%a %U %G", "/etc/batchd/batchd.toml").stdout.split() == ["640", "root", "batchd"]


# -- the journal: one entry per record, and none forged ---------------------------------

FAILING_SPIDER = '''
import batchd


class FailingSpider(batchd.BatchSpider):
    __task_table__ = "crawl_task"

    def task_requests(self, task):
        yield batchd.Request(task["url"], callback=self.parse)

    def parse(self, request, response, task):
        # The worker logs this at ERROR with its traceback; the message quotes what it got.
        raise ValueError(f"no parse for {response.url}\\r\\nX-Injected: 2")
'''


def journal_entries(box, *units) -> list:
    """The units' entries as `journalctl -o json` gives them, batchd's own only."""
    out = box.run("journalctl", "--no-pager", "-o", "json", *(f"--unit={unit}" for unit in units)).stdout
    entries = [json.loads(line) for line in out.splitlines()]
    for entry in entries:
        if isinstance(entry.get("MESSAGE"), list):   # a message with control characters comes as its bytes
            entry["MESSAGE"] = bytes(entry["MESSAGE"]).decode("utf-8", "replace")
    return [entry for entry in entries if entry.get("SYSLOG_IDENTIFIER") == "batchd"]


def entry_starting(entries, pattern):
    return next((entry for entry in entries if re.match(pattern, entry["MESSAGE"])), None)


def test_journal_entries_cannot_be_forged(built, box, site, box_backend):
    """Under the installed package (python3-systemd's JournalHandler): a record with a traceback
    is one entry at the record's priority, and a CR LF in a task URL or an exception stays inside
    its entry, escaped."""
    check_journal_entries(built, box, site, box_backend)


def check_journal_entries(built, box, site, backend):
    install_deb(built, box)
    page, forged = site.url("/page/1"), site.url("/missing") + "\r\nX-Injected: 1"
    backend.create_tasks([page, forged])
    config = box_config(backend).replace("paced.py:PacedSpider", "failing.py:FailingSpider")
    box.write("/etc/batchd/batchd.toml", config)
    box.write("/etc/batchd/spiders/failing.py", FAILING_SPIDER)
    units = ("batchd-master", "batchd-worker@1")
    box.run("systemctl", "start", *units)
    wait_for(lambda: set(backend.states().values()) == {TaskState.FAILED}, timeout=60,
             message="both tasks failed")

    def failures_logged():
        entries = journal_entries(box, *units)
        found = [entry_starting(entries, rf"worker [^\[]+\[\d+\]: task {n} failed") for n in (1, 2)]
        return found if all(found) else None
    error, warning = wait_for(failures_logged, timeout=30, message="both failures in the journal")

    # The callback's exception: one entry, the traceback inside it, every line of it marked.
    print(json.dumps({name: error.get(name) for name in ("MESSAGE", "PRIORITY", "SYSLOG_IDENTIFIER", "BATCHD_ROLE",
                                                         "BATCHD_NAMESPACE", "BATCHD_BATCH", "BATCHD_TASK_ID",
                                                         "_TRANSPORT", "_PID")}, indent=1, ensure_ascii=False))
    message = error["MESSAGE"].split("\n")
    assert (error["PRIORITY"], error["_TRANSPORT"]) == ("3", "journal")
    # batchd's fields: `journalctl BATCHD_TASK_ID=1` finds the task's story.
    # (The box's config sets no NAMESPACE: the task table's name.)
    assert (error["BATCHD_ROLE"], error["BATCHD_NAMESPACE"], error["BATCHD_TASK_ID"]) == ("worker", "crawl_task", "1")
    assert error["BATCHD_BATCH"] == str(backend.records()[-1]["id"])
    assert rf"task 1 failed: ValueError: no parse for {page}\r\nX-Injected: 2 (the traceback starts in the spider's " \
        "code: " in message[0], message[0]
    assert message[1] == "  | Traceback (most recent call last):"
    assert all(line.startswith("  | ") for line in message[1:])
    assert message[-1] == rf"  | ValueError: no parse for {page}\r\nX-Injected: 2"
    # The URL of the other task: escaped in its warning.
    assert warning["PRIORITY"] == "4" and rf"{site.url('/missing')}\r\nX-Injected: 1" in warning["MESSAGE"]

    # Nothing took another way to the journal (a raw line on stderr is an entry of its own), and
    # no line anywhere begins with the injected text.
    entries = journal_entries(box, *units)
    assert [entry for entry in entries if entry["_TRANSPORT"] != "journal"] == []
    lines = [line.removeprefix("  | ") for entry in entries for line in entry["MESSAGE"].split("\n")]
    assert not [line for line in lines if line.startswith("X-Injected")]


# -- METRICS_PORT under systemd ------------------------------------------------------------

def test_a_unit_serves_metrics_from_its_runtime_directory(built, box, site, box_backend):
    """One instance's own port (worker-1.toml), its workers' files in its RuntimeDirectory=, removed at stop."""
    pytest.importorskip("prometheus_client")
    install_deb(built, box)
    box_backend.create_tasks([site.url(f"/page/{n}") for n in range(1, 11)])
    port = free_port()
    box.write("/etc/batchd/batchd.toml", box_config(box_backend).replace("paced.py:PacedSpider", "seed.py:CrawlTask"))
    box.write("/etc/batchd/worker-1.toml", f"METRICS_PORT = {port}\n", mode="0640", owner="root:batchd")
    with open(os.path.join(HERE, "spiders", "seed.py"), encoding="utf-8") as seed:
        box.write("/etc/batchd/spiders/seed.py", seed.read())
    box.run("systemctl", "start", "batchd-master", "batchd-worker@1")
    wait_for(lambda: value(try_scrape(port), "batchd_tasks_total", outcome="done") == 10, timeout=60,
             message="10 tasks counted by batchd-worker@1")
    assert set(box_backend.states().values()) == {TaskState.DONE}
    files = box.run("ls", "/run/batchd-worker@1/metrics-1").stdout.split()
    assert files and all(re.fullmatch(r"(counter|histogram|gauge_livesum)_\d+\.db", f) for f in files), files
    box.run("systemctl", "stop", "batchd-master", "batchd-worker@1", timeout=STOP_TIMEOUT_SEC + 30)
    assert box.run("test", "-e", "/run/batchd-worker@1", check=False).returncode != 0


# -- systemctl reload checks the configuration first ------------------------------------

def test_reload_with_a_broken_config_fails_and_keeps_the_children(built, box, site, box_backend):
    """`systemctl reload` runs `batchd reload` in the unit's sandbox: a broken batchd.toml fails the
    reload, with the error in `systemctl status`, and the supervisor keeps its child; once the file
    is fixed, the reload goes through and the child is replaced."""
    check_reload_checks_first(built, box, site, box_backend)


def check_reload_checks_first(built, box, site, backend):
    install_deb(built, box)
    backend.create_tasks([site.url(f"/page/{n}") for n in range(1, 4)])
    config = box_config(backend)
    box.write("/etc/batchd/batchd.toml", config)
    box.write("/etc/batchd/spiders/paced.py", SPIDER)
    box.run("systemctl", "start", "batchd-master")

    def master_children() -> set:
        return {pid for pid, _, args in box.unit_processes("batchd-master") if args.startswith("batchd: master ")}
    children = wait_for(master_children, timeout=30, message="the master child")
    before = box.show("batchd-master")

    box.write("/etc/batchd/batchd.toml", config + 'LOG_LEVEL = "INFO\n')      # an unterminated string
    refused = box.run("systemctl", "reload", "batchd-master", check=False)
    assert refused.returncode != 0, refused.stdout + refused.stderr
    status = box.run("systemctl", "status", "--no-pager", "--full", "-n", "20", "batchd-master", check=False).stdout
    assert "reload refused, supervisor " in status and "config file /etc/batchd/batchd.toml: invalid TOML" in status, \
        status
    after = box.show("batchd-master")
    assert (after["MainPID"], after["ActiveState"], after["NRestarts"]) == \
        (before["MainPID"], "active", before["NRestarts"])
    assert master_children() == children

    box.write("/etc/batchd/batchd.toml", config)
    box.run("systemctl", "reload", "batchd-master")
    wait_for(lambda: master_children() and not master_children() & children, timeout=60,
             message="the master child replaced after the reload")
    after = box.show("batchd-master")
    assert (after["MainPID"], after["ActiveState"]) == (before["MainPID"], "active")
    box.run("systemctl", "stop", "batchd-master", timeout=STOP_TIMEOUT_SEC + 30)
