"""No browser process outlives its worker (batchd/render/processes.py): a supervised batch that renders its pages
in Chromium leaves none behind when it ends, nor when its worker is SIGKILLed mid-batch, and loses no task."""
import os
import signal

import pytest

from batchd.render.processes import descendants
from harness import wait_for
from procs import live
from supervised import lines_with, start_batchd, workers_of

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/bin/chromedriver"),
                                reason="apt install chromium chromium-driver (.ci/run installs them)")
SPIDER = "spiders/rendering.py:RenderTask"


def browsers_of(pid):
    """The live processes under `pid` that are a browser's: chromedriver, chromium and its helpers."""
    return [child for child in live(descendants(pid)) if _is_browser(child)]


def _is_browser(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"chrom" in f.read()
    except OSError:
        return False


def test_a_rendered_batch_stores_every_item_and_leaves_no_browser(mysql_backend, site, procs):
    urls = [site.url(f"/js/{n}?delay=0.2") for n in range(1, 9)]
    mysql_backend.create_tasks(urls)
    proc = start_batchd(procs, mysql_backend, "run", "--workers", "1", "--once", spider=SPIDER)
    seen = set(wait_for(lambda: browsers_of(proc.pid), message="the worker's browsers"))
    assert proc.wait(90) == 0, proc.output()
    assert lines_with(proc, "8 pages rendered in"), "the batch's done line counts its rendered pages"
    assert sorted((item["url"], item["title"]) for item in mysql_backend.items()) == sorted(
        (url, f"Title {n}") for n, url in enumerate(urls, start=1))
    wait_for(lambda: not live(seen), timeout=10, message="no browser process left after the batch")


def test_a_workers_browsers_die_with_it_when_it_is_sigkilled(mysql_backend, site, procs):
    urls = [site.url(f"/js/{n}?delay=0.5") for n in range(1, 13)]
    mysql_backend.create_tasks(urls)
    proc = start_batchd(procs, mysql_backend, "run", "--workers", "1", "--once", spider=SPIDER,
                        RENDER_CONCURRENCY=2)
    victim = wait_for(lambda: workers_of(proc.pid), message="a worker")[0]
    browsers = wait_for(lambda: browsers_of(victim) if len(browsers_of(victim)) >= 4 else None,
                        message="the worker's browsers")
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: not live(browsers), timeout=10, message="none of the killed worker's browser processes alive")
    wait_for(lambda: lines_with(proc, f"(pid {victim}) was killed by SIGKILL"), message="the death line")
    assert proc.wait(120) == 0, proc.output()
    assert sorted(item["url"] for item in mysql_backend.items()) == sorted(urls), "nothing lost"
