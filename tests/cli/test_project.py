"""A project on the embedded store, as `batchd init` writes it: batchd finds its config in the project's
folder, the verbs that only read make no file, `batchd check` passes on it, a spider that does not import
stops a run at once with one line (exit 78), and `batchd status` reads the spider without importing it."""
import os
import re
import subprocess
import sys
import time

import pytest

from procs import ROOT

CLEAN_ENV = {k: v for k, v in os.environ.items()
             if not k.startswith(("BATCHD_", "TEST_")) and k not in ("INVOCATION_ID", "NOTIFY_SOCKET")}
ENV = dict(CLEAN_ENV, PYTHONPATH=ROOT, BATCHD_BATCH_MONITOR_INTERVAL="0.3", BATCHD_STATUS_INTERVAL="0.5")
SYNTAX_ERROR = 'import batchd\n\n\nclass CrawlTask(batchd.BatchSpider):\n    __task_table__ = "crawl_task"\n\n' \
               '    def task_requests(self, task)\n        yield None\n'


def batchd(*args, cwd, env=ENV, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "batchd", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def project(tmp_path, site, robots: bool = True):
    """`batchd init` into tmp_path/crawl, its spider on the test site, two tasks added: the store is made."""
    folder = tmp_path / "crawl"
    assert batchd("init", str(folder), cwd=tmp_path).returncode == 0
    config = folder / "batchd.toml"
    config.write_text(config.read_text().replace("ROBOTSTXT_OBEY = true", f"ROBOTSTXT_OBEY = {str(robots).lower()}"))
    added = batchd("tasks", "add", site.url("/page/1"), site.url("/page/2"), cwd=folder)
    assert added.returncode == 0, added.stderr
    return folder


def test_in_its_folder_batchd_reads_the_projects_config_and_says_so(tmp_path, site):
    folder = project(tmp_path, site)
    run = batchd("run", "--once", "--workers", "1", cwd=folder)
    assert run.returncode == 0, run.stderr
    config = f"config {folder}/batchd.toml (./batchd.toml)"
    assert config in run.stderr.splitlines()[0]
    status = batchd("status", cwd=folder)
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert lines[:2] == ["namespace crawl_task (task table crawl_task)", "config   " + config[len("config "):]]
    assert "progress 2/2: 2 done, 0 failed" in status.stdout and "unflushed items 0" in lines
    where = f"table crawl_task_item of SQLite {folder}/batchd.db"
    assert f"items    in {where}" in lines, "how to see what the batch got"
    assert f"2 items stored by this host's workers (in {where})" in run.stderr.splitlines()[-1]
    rate, = [line for line in lines if line.startswith("rate ")]
    assert rate.endswith("finished, no ETA") and "unknown" not in rate
    history = batchd("status", "--history", cwd=folder).stdout.splitlines()
    assert re.search(r" 2 +0 +2 +2 .*(>=)?\d+\.\d/s$", history[1]), history
    elsewhere = batchd("status", cwd=tmp_path)       # no ./batchd.toml here, no /etc/batchd/batchd.toml
    assert elsewhere.returncode == 78 and "no store here yet" in elsewhere.stderr
    assert not os.path.exists(tmp_path / "batchd.db")


@pytest.mark.parametrize("verb", ["status", "failed", "quality", "check"])
def test_a_verb_that_only_reads_makes_no_store(tmp_path, verb):
    spider = os.path.join(ROOT, "tests", "spiders", "seed.py") + ":CrawlTask"
    env = dict(ENV, BATCHD_CONFIG=os.devnull)
    here = batchd(verb, spider, cwd=tmp_path, env=env)           # nothing names a store: ./batchd.db, not there
    named = batchd(verb, spider, "--store", f"sqlite:///{tmp_path}/crawl.db", cwd=tmp_path, env=env)
    assert (here.returncode, named.returncode) == (78, 78)
    for result, words in ((here, "no store here yet"), (named, f"no store at {tmp_path}/crawl.db yet")):
        said = result.stdout if verb == "check" else result.stderr      # check: its FAIL line
        line, = [line for line in said.splitlines() if words in line]
        assert "batchd tasks add" in line and "Traceback" not in result.stderr
        if verb != "check":
            assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("robots", [True, False])
def test_check_passes_on_the_project_init_writes(tmp_path, site, robots):
    folder = project(tmp_path, site, robots)
    check = batchd("check", cwd=folder)
    assert check.returncode == 0, check.stdout + check.stderr
    assert [line.split()[0] for line in check.stdout.splitlines() if not line.startswith("TERMS")] == ["OK"] * 10
    assert ("RobotsTxtMiddleware" in check.stdout) is robots


@pytest.mark.parametrize("source, words", [
    (SYNTAX_ERROR, "SyntaxError: expected ':' (spider.py line 7)"),
    ("import batchd\nimport helper_not_there\n", "ModuleNotFoundError: No module named 'helper_not_there' "
                                                 "(spider.py line 2)"),
    ("import batchd\n\n\nclass Other(batchd.BatchSpider):\n    __task_table__ = 't'\n",
     "has no class 'CrawlTask' (it defines Other)"),
])
def test_a_spider_that_does_not_import_stops_the_run_at_once_with_one_line(tmp_path, source, words):
    (tmp_path / "spider.py").write_text(source)
    env = dict(ENV, BATCHD_CONFIG=os.devnull, BATCHD_STORE=f"sqlite:///{tmp_path}/crawl.db")
    started = time.monotonic()
    run = batchd("run", "spider.py:CrawlTask", cwd=tmp_path, env=env)
    assert run.returncode == 78
    errors = [line for line in run.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and words in errors[0] and f"{tmp_path}/spider.py" in errors[0], run.stderr
    assert "Traceback" not in run.stderr and "attempt" not in run.stderr
    assert time.monotonic() - started < 15          # no backoff between attempts: there are none


def test_status_reads_the_spider_without_importing_it(tmp_path, site):
    folder = project(tmp_path, site)
    assert batchd("run", "--once", "--workers", "1", cwd=folder).returncode == 0
    spider = folder / "spider.py"
    working = spider.read_text()
    spider.write_text(f"open({str(folder / 'imported')!r}, 'w').close()\n" + working)
    status = batchd("status", cwd=folder)
    assert status.returncode == 0 and "progress 2/2" in status.stdout
    assert "spider " not in status.stdout and not os.path.exists(folder / "imported")      # never ran
    spider.write_text(SYNTAX_ERROR)
    broken = batchd("status", cwd=folder)
    assert broken.returncode == 0, broken.stderr
    line, = [line for line in broken.stdout.splitlines() if line.startswith("spider ")]
    assert line.startswith("spider   spider.py line 7: SyntaxError: expected ':'; not read: __item_table__")
    assert "progress 2/2: 2 done" in broken.stdout
    spider.write_text(SYNTAX_ERROR.replace('__task_table__ = "crawl_task"', "__task_table__ = TABLES[0]"))
    lost = batchd("status", cwd=folder)
    assert lost.returncode == 78 and lost.stdout == ""
    assert "SyntaxError" in lost.stderr and "status needs its __task_table__" in lost.stderr
    assert len(lost.stderr.strip().splitlines()) == 1 and "Traceback" not in lost.stderr


def test_tasks_import_sitemap_adds_the_new_urls_and_names_a_sitemap_it_cannot_read(tmp_path, site):
    """The verb on the embedded store: robots.txt names a sitemap and one that is not there; the command adds its
    URLs, names the missing sitemap in one line and ends with 1; once that one is gone, with 0, adding nothing."""
    from sitemap_texts import urlset
    from supervised import SEED
    spider = os.path.join(ROOT, "tests", SEED)
    site.files["sitemap.xml"] = urlset([site.url("/page/1"), site.url("/page/3"), site.url("/page/1")])
    site.robots_txt = f"Sitemap: {site.url('/files/sitemap.xml')}\nSitemap: {site.url('/files/gone.xml')}\n"
    result = batchd("tasks", "import-sitemap", spider, site.url("/robots.txt"), cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert f"sitemap '{site.url('/files/gone.xml')}': HTTP 404; the other sitemaps go on" in result.stderr
    assert "1 sitemap read (1 could not be read), 3 URLs seen: 2 tasks added to crawl_task, 1 already known" \
        in result.stderr
    site.robots_txt = f"Sitemap: {site.url('/files/sitemap.xml')}\n"
    again = batchd("tasks", "import-sitemap", spider, site.url("/robots.txt"), cwd=tmp_path)
    assert again.returncode == 0 and "0 tasks added to crawl_task, 3 already known" in again.stderr, again.stderr
