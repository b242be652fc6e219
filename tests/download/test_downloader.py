"""batchd/download/downloader.py against a real local HTTP server (tests/httpserver.py): retries, the deadline and
the size limit, what reaches the server, proxies from the environment, redirects, TLS, the spider's hooks."""
import json
import logging
import threading
import time
import tracemalloc
from email.utils import formatdate
from urllib.parse import urlencode

import pytest
from requests.cookies import RequestsCookieJar
import requests

from batchd.config import Settings
from batchd.http import Request, RequestFailed, Response
from batchd.service.threads import guard, start_thread
from harness import wait_for
from batchd.assembly import downloader_for
from httpserver import BOMB_DECODED, COMPRESSED_CASES, COMPRESSIBLE_PAGE, TestSite, gzip_bomb, self_signed_certificate

MB = 1024 * 1024


class SleepRecorder:
    """A `sleep` for Downloader that records the waits instead of waiting, and the clock they pass on."""

    def __init__(self):
        self.waits = []

    def __call__(self, seconds):
        self.waits.append(seconds)
        return False

    def clock(self):
        return time.monotonic() + sum(self.waits)


def fail(downloader, request, *hooks):
    with pytest.raises(RequestFailed) as caught:
        downloader.fetch(request, *hooks)
    return caught.value


# --- retries -------------------------------------------------------------------------


def test_503_twice_then_200_succeeds_on_the_third_hit(site, make_downloader):
    response = make_downloader().fetch(Request(site.url("/flaky/a?fail=2&status=503")))

    assert response.status_code == 200
    assert response.css("title::text").get() == "flaky a"
    assert site.hits("/flaky/a") == 3


@pytest.mark.parametrize("status", [408, 429, 500, 502])
def test_retryable_statuses_are_retried(site, make_downloader, status):
    response = make_downloader().fetch(Request(site.url(f"/flaky/s{status}?fail=1&status={status}")))

    assert response.status_code == 200
    assert site.hits(f"/flaky/s{status}") == 2


def test_404_fails_at_once(site, make_downloader):
    recorder = SleepRecorder()
    failure = fail(make_downloader(sleep=recorder), Request(site.url("/status/404")))

    assert failure.reason == "HTTP 404"
    assert failure.attempts == 1
    assert isinstance(failure.response_or_exception, Response)
    assert failure.response_or_exception.status_code == 404
    assert site.hits("/status/404") == 1
    assert recorder.waits == []


def test_500_fails_after_max_retry_times_plus_one_attempts(site, make_downloader):
    failure = fail(make_downloader(max_retry_times=2), Request(site.url("/status/500")))

    assert failure.reason == "HTTP 500 after 3 attempts"
    assert failure.attempts == 3
    assert failure.response_or_exception.status_code == 500
    assert site.hits("/status/500") == 3


def test_default_is_three_retries(site, make_downloader):
    failure = fail(make_downloader(), Request(site.url("/status/503")))

    assert failure.reason == "HTTP 503 after 4 attempts"
    assert site.hits("/status/503") == 4


def test_request_max_retry_times_overrides_the_downloader(site, make_downloader):
    failure = fail(make_downloader(max_retry_times=3), Request(site.url("/status/500"), max_retry_times=0))

    assert failure.reason == "HTTP 500"
    assert site.hits("/status/500") == 1


def test_backoff_grows_exponentially_capped_and_jittered(site, make_downloader):
    recorder = SleepRecorder()
    downloader = make_downloader(max_retry_times=4, backoff_base=1.0, backoff_max=3.0, sleep=recorder)
    fail(downloader, Request(site.url("/status/500")))

    ceilings = [1.0, 2.0, 3.0, 3.0]
    assert len(recorder.waits) == 4
    assert all(0 <= wait <= ceiling for wait, ceiling in zip(recorder.waits, ceilings))
    assert len(set(recorder.waits)) == 4  # random, so four equal waits mean no jitter


def test_retry_after_seconds_is_waited(site, make_downloader):
    downloader = make_downloader(backoff_base=0.01, backoff_max=5.0)
    started = time.monotonic()
    response = downloader.fetch(Request(site.url("/flaky/ra?fail=1&status=429&retry_after=0.3")))

    assert time.monotonic() - started >= 0.3
    assert response.status_code == 200
    assert site.hits("/flaky/ra") == 2


def test_retry_after_http_date_is_read(site, make_downloader):
    recorder = SleepRecorder()
    when = formatdate(time.time() + 20, usegmt=True)
    downloader = make_downloader(backoff_max=60.0, sleep=recorder)
    downloader.fetch(Request(site.url("/flaky/date"), params={"fail": 1, "status": 503, "retry_after": when}))

    assert len(recorder.waits) == 1
    assert 15 <= recorder.waits[0] <= 21


def test_retry_after_is_capped_at_backoff_max(site, make_downloader):
    recorder = SleepRecorder()
    downloader = make_downloader(backoff_max=0.5, sleep=recorder)
    downloader.fetch(Request(site.url("/flaky/cap?fail=1&status=503&retry_after=120")))

    assert len(recorder.waits) == 1 and recorder.waits[0] == pytest.approx(0.5, abs=0.05)   # (less the answer's time)


def test_connection_drop_is_retried(site, make_downloader):
    failure = fail(make_downloader(max_retry_times=2), Request(site.url("/drop")))

    assert isinstance(failure.response_or_exception, requests.ConnectionError)
    assert failure.reason.startswith("ConnectionError after 3 attempts: ")
    assert "\n" not in failure.reason
    assert site.hits("/drop") == 3


def seen_by_the_site(site, path, count):
    """The site saw `count` hits of `path`: its thread may read an attempt the client already gave up on (a timeout)
    only later, on a busy machine after the failure is in the test's hands."""
    wait_for(lambda: site.hits(path) >= count, timeout=10, message=f"{count} hits of {path} at the site")
    assert site.hits(path) == count


@pytest.mark.parametrize("timeout_on", ["request", "downloader"])
def test_read_timeout_is_retried_then_fails(site, make_downloader, timeout_on):
    downloader = make_downloader(max_retry_times=1, timeout=0.2 if timeout_on == "downloader" else 5.0)
    request = Request(site.url("/slow?seconds=1"), timeout=0.2 if timeout_on == "request" else None)
    failure = fail(downloader, request)

    assert isinstance(failure.response_or_exception, requests.ReadTimeout)
    assert failure.reason.startswith("ReadTimeout after 2 attempts: ")
    seen_by_the_site(site, "/slow", 2)


@pytest.mark.parametrize("url", ["not a url", "htp://x", "http://"])
def test_malformed_url_fails_at_once_naming_the_url(make_downloader, url):
    recorder = SleepRecorder()
    failure = fail(make_downloader(sleep=recorder), Request(url))

    assert failure.reason.startswith(f"invalid URL: {url!r} (")
    assert "\n" not in failure.reason
    assert failure.attempts == 1
    assert recorder.waits == []


def test_a_sleep_that_asks_to_stop_ends_the_retry_loop(site, make_downloader):
    stop = threading.Event()
    stop.set()
    # A backoff long enough that the retry waits (a jittered wait of 1 ms may be over before it is asked).
    failure = fail(make_downloader(sleep=stop.wait, backoff_base=5.0, backoff_max=5.0),
                   Request(site.url("/status/503")))

    assert failure.reason == "stopped"
    assert failure.attempts == 1
    assert site.hits("/status/503") == 1


def test_redirects_are_followed(site, make_downloader):
    response = make_downloader().fetch(Request(site.url("/redirect?to=/page/2")))

    assert response.url == site.url("/page/2")
    assert response.css("h1::text").get() == "Title 2"


def test_a_redirect_not_followed_is_not_retried(site, make_downloader):
    failure = fail(make_downloader(), Request(site.url("/redirect?to=/page/2"), allow_redirects=False))

    assert failure.reason == "HTTP 302"
    assert site.hits("/redirect") == 1
    assert site.hits("/page/2") == 0


# --- DOWNLOAD_TIMEOUT and DOWNLOAD_MAXSIZE ---------------------------------------------


@pytest.mark.parametrize("part", ["body", "headers"])
def test_a_trickle_fails_at_the_download_timeout_and_is_retried_like_a_timeout(site, make_downloader, part):
    downloader = make_downloader(download_timeout=1.0, max_retry_times=1)
    started = time.monotonic()
    failure = fail(downloader, Request(site.url(f"/trickle?part={part}&every=0.05")))
    elapsed = time.monotonic() - started

    assert failure.reason == "DownloadTimeout after 2 attempts: download took longer than DOWNLOAD_TIMEOUT (1 s)"
    assert isinstance(failure.response_or_exception, requests.Timeout)
    seen_by_the_site(site, "/trickle", 2)
    assert 2.0 <= elapsed < 10.0  # two deadlines; no read ever waits the 5 s read timeout


def test_a_stall_after_the_headers_is_a_read_timeout(site, make_downloader):
    downloader = make_downloader(timeout=0.3, max_retry_times=1)
    failure = fail(downloader, Request(site.url("/stall?length=100&sent=10")))

    assert isinstance(failure.response_or_exception, requests.ReadTimeout)
    assert failure.reason.startswith("ReadTimeout after 2 attempts: ")
    seen_by_the_site(site, "/stall", 2)


@pytest.mark.parametrize("query", ["", "?fin=1"])
def test_a_body_cut_short_by_a_reset_or_a_close_is_retried_as_a_transient_error(site, make_downloader, query):
    failure = fail(make_downloader(max_retry_times=2), Request(site.url(f"/reset{query}")))

    assert isinstance(failure.response_or_exception,
                      (requests.ConnectionError, requests.exceptions.ChunkedEncodingError))
    assert " after 3 attempts: " in failure.reason
    assert "\n" not in failure.reason
    assert site.hits("/reset") == 3


def test_a_content_length_over_the_limit_fails_at_once_without_reading_the_body(site, make_downloader):
    # The announced body never comes: reading it would end in a read timeout, not in this failure.
    recorder = SleepRecorder()
    downloader = make_downloader(maxsize=MB, timeout=2.0, sleep=recorder)
    failure = fail(downloader, Request(site.url(f"/stall?length={MB + 1}&sent=0")))

    assert failure.reason == f"ResponseTooLarge: Content-Length {MB + 1} exceeds DOWNLOAD_MAXSIZE ({MB} bytes)"
    assert failure.attempts == 1
    assert recorder.waits == []
    seen_by_the_site(site, "/stall", 1)


@pytest.mark.parametrize("chunked, too_large", [
    (0, "Content-Length 100001 exceeds DOWNLOAD_MAXSIZE (100000 bytes)"),
    (1, "decoded body exceeds DOWNLOAD_MAXSIZE (100000 bytes)"),
])
def test_a_body_of_maxsize_passes_and_one_byte_more_fails(site, make_downloader, chunked, too_large):
    downloader = make_downloader(maxsize=100_000)

    assert downloader.fetch(Request(site.url(f"/bytes/100000?chunked={chunked}"))).content == b"x" * 100_000
    failure = fail(downloader, Request(site.url(f"/bytes/100001?chunked={chunked}")))
    assert failure.reason == f"ResponseTooLarge: {too_large}"
    assert failure.attempts == 1


@pytest.mark.parametrize("case", sorted(COMPRESSED_CASES))
def test_compressed_bodies_are_decoded_and_the_limit_counts_decoded_bytes(site, make_downloader, case):
    size = len(COMPRESSIBLE_PAGE)
    response = make_downloader(maxsize=size).fetch(Request(site.url(f"/compressed/{case}")))

    assert response.content == COMPRESSIBLE_PAGE
    assert response.css("title::text").get() == "compressed"
    failure = fail(make_downloader(maxsize=size - 1), Request(site.url(f"/compressed/{case}")))
    assert failure.reason == f"ResponseTooLarge: decoded body exceeds DOWNLOAD_MAXSIZE ({size - 1} bytes)"


@pytest.mark.parametrize("maxsize", [MB, 64 * MB])
def test_a_decompression_bomb_fails_at_once_in_bounded_memory(site, make_downloader, maxsize):
    bomb = gzip_bomb()  # built before measuring: the site's copy is not the downloader's memory
    downloader = make_downloader(maxsize=maxsize)
    tracemalloc.start()
    try:
        failure = fail(downloader, Request(site.url("/gzip-bomb")))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    assert failure.reason == f"ResponseTooLarge: decoded body exceeds DOWNLOAD_MAXSIZE ({maxsize} bytes)"
    assert failure.attempts == 1
    assert site.hits("/gzip-bomb") == 1
    assert len(bomb) < BOMB_DECODED // 500
    assert peak < maxsize + 8 * MB  # what was kept up to the limit, not the 200 MB it expands to


def test_limits_leave_normal_pages_and_pooled_connections_alone(site, make_downloader):
    downloader = make_downloader(download_timeout=1.0, maxsize=2000)
    ports = {echo(site, downloader)["client_port"] for _ in range(20)}

    assert len(ports) == 1  # every body was read to its end, so the connection went back to the pool
    assert downloader.fetch(Request(site.url("/redirect?to=/page/2"))).css("h1::text").get() == "Title 2"
    assert downloader.fetch(Request(site.url("/enc/gbk-header"))).encoding == "gb18030"


def test_a_head_request_is_not_held_to_its_content_length(site, make_downloader):
    response = make_downloader(maxsize=1000).fetch(Request(site.url("/bytes/5000"), method="HEAD"))

    assert response.headers["Content-Length"] == "5000"
    assert response.content == b""


def test_one_guarded_deadline_thread_per_downloader_until_close(site, make_downloader):
    def deadline_threads():
        return [thread for thread in threading.enumerate() if thread.name == "batchd-deadlines"]

    before = len(deadline_threads())
    downloader = make_downloader()
    fetchers = [threading.Thread(target=lambda: [downloader.fetch(Request(site.url(f"/page/{n}")))
                                                 for n in range(10)]) for _ in range(4)]
    for thread in fetchers:
        thread.start()
    for thread in fetchers:
        thread.join()

    assert len(deadline_threads()) == before + 1
    assert "batchd-deadlines" not in [name for name, _late in guard.stale(0.0)]  # it promised its next check-in
    downloader.close()
    assert len(deadline_threads()) == before


def test_a_guarded_thread_promises_each_attempt_within_the_deadline(site, make_downloader):
    downloader = make_downloader(download_timeout=1.0, max_retry_times=0)
    failures = []

    def fetch_the_trickle():
        try:
            downloader.fetch(Request(site.url("/trickle")))
        except RequestFailed as failure:
            failures.append(failure)

    fetcher = start_thread(fetch_the_trickle, "test-fetch")
    wait_for(lambda: site.hits("/trickle") == 1, timeout=10, message="the trickle's first hit")

    assert "test-fetch" not in [name for name, _late in guard.stale(0.0)]
    fetcher.join(10)
    assert [failure.reason for failure in failures] == \
        ["DownloadTimeout: download took longer than DOWNLOAD_TIMEOUT (1 s)"]


# --- what reaches the server ---------------------------------------------------------


def echo(site, downloader, **request_options):
    return downloader.fetch(Request(site.url("/echo"), **request_options)).json()


def test_params_headers_cookies_and_json_body_reach_the_server(site, make_downloader):
    seen = echo(site, make_downloader(), method="post", params={"b": "2", "a": "1"},
                headers={"X-Batch": "7"}, cookies={"session": "abc"}, json={"word": "中文"})

    assert seen["method"] == "POST"
    assert seen["path"] == "/echo?b=2&a=1"
    assert seen["headers"]["x-batch"] == "7"
    assert seen["headers"]["cookie"] == "session=abc"
    assert seen["headers"]["content-type"] == "application/json"
    assert json.loads(seen["body"]) == {"word": "中文"}


def test_form_data_reaches_the_server(site, make_downloader):
    seen = echo(site, make_downloader(), method="PUT", data={"field": "value", "n": 2})

    assert seen["method"] == "PUT"
    assert seen["headers"]["content-type"] == "application/x-www-form-urlencoded"
    assert seen["body"] == "field=value&n=2"


def test_user_agent_default_and_overrides(site, make_downloader):
    default = echo(site, make_downloader())["headers"]["user-agent"]
    assert default == "batchd" or default.startswith("batchd/")

    downloader = make_downloader(headers={"User-Agent": "spider/1"})
    assert echo(site, downloader)["headers"]["user-agent"] == "spider/1"
    assert echo(site, downloader, headers={"User-Agent": "task/2"})["headers"]["user-agent"] == "task/2"


def test_cookies_live_in_their_tasks_jar_whichever_thread_sends(site, make_downloader):
    downloader = make_downloader()
    first, second = RequestsCookieJar(), RequestsCookieJar()
    downloader.use_cookies(first)
    downloader.fetch(Request(site.url("/set-cookie?tracker=1")))
    assert echo(site, downloader)["headers"]["cookie"] == "tracker=1"     # the next request of the same task

    downloader.use_cookies(second)                                        # another task in this thread
    assert "cookie" not in echo(site, downloader)["headers"]
    seen = []

    def the_first_task_goes_on_in_another_thread():
        downloader.use_cookies(first)
        seen.append(echo(site, downloader)["headers"].get("cookie"))

    thread = threading.Thread(target=the_first_task_goes_on_in_another_thread)
    thread.start()
    thread.join(30)
    assert seen == ["tracker=1"]


def test_one_pooled_session_per_thread(site, make_downloader):
    downloader = make_downloader()
    main_ports = [echo(site, downloader)["client_port"] for _ in range(2)]

    thread_ports = []
    for _ in range(2):  # one after the other: a shared session would reuse one connection
        thread = threading.Thread(target=lambda: thread_ports.append(echo(site, downloader)["client_port"]))
        thread.start()
        thread.join()

    assert main_ports[0] == main_ports[1]
    assert len({main_ports[0], *thread_ports}) == 3


def test_close_closes_the_connections_and_fetch_still_works(site, make_downloader):
    downloader = make_downloader()
    before = echo(site, downloader)["client_port"]
    downloader.close()

    assert echo(site, downloader)["client_port"] != before


# --- the environment's proxies ---------------------------------------------------------

def test_the_environments_proxy_is_used_and_no_proxy_honoured(site, make_downloader, monkeypatch):
    """Read once per origin (the sessions do not read the environment on every request)."""
    from servers import spare_port
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{spare_port()}")     # nothing listens there
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with pytest.raises(RequestFailed, match="(?i)proxy"):
        make_downloader(max_retry_times=0).fetch(Request(site.url("/page/1")))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert make_downloader(max_retry_times=0).fetch(Request(site.url("/page/1"))).status_code == 200
    assert site.hits("/page/1") == 1


# --- headers, redirects, sizes, TLS ----------------------------------------------------

def test_several_user_agents_rotate_and_a_requests_own_wins(site, make_downloader):
    downloader = make_downloader(user_agents=("bot/a", "bot/b", "bot/c"))
    seen = {echo(site, downloader)["headers"]["user-agent"] for _ in range(40)}
    assert len(seen) > 1 and seen <= {"bot/a", "bot/b", "bot/c"}
    assert echo(site, downloader, headers={"user-agent": "task/2"})["headers"]["user-agent"] == "task/2"
    assert echo(site, make_downloader(user_agents=("only/1",)))["headers"]["user-agent"] == "only/1"


def test_default_request_headers_go_with_every_request_and_a_requests_own_win(site, make_downloader):
    downloader = make_downloader(headers={"Accept": "text/html", "X-Team": "crawl"})
    assert {k: v for k, v in echo(site, downloader)["headers"].items() if k in ("accept", "x-team")} == \
        {"accept": "text/html", "x-team": "crawl"}
    assert echo(site, downloader, headers={"X-Team": "mine"})["headers"]["x-team"] == "mine"
    assert echo(site, downloader)["headers"]["accept-encoding"] == "gzip, deflate", "what the reader decodes"


def chain(site, hops):
    """A URL that redirects `hops` times before /page/1."""
    path = "/page/1"
    for _ in range(hops):
        path = "/redirect?" + urlencode({"to": path})
    return site.url(path)


def test_redirects_are_kept_in_the_history_and_capped_by_redirect_max_times(site, make_downloader):
    response = make_downloader(max_redirects=3).fetch(Request(chain(site, 3)))
    assert response.url == site.url("/page/1") and response.css("h1::text").get() == "Title 1"
    assert [hop.status_code for hop in response.history] == [302, 302, 302]
    assert response.history[0].url == chain(site, 3) and response.history[-1].url == chain(site, 1)
    assert make_downloader().fetch(Request(site.url("/page/2"))).history == []
    failure = fail(make_downloader(max_redirects=2), Request(chain(site, 3)))
    assert failure.reason == "more than REDIRECT_MAX_TIMES (2) redirects" and failure.attempts == 1


def test_a_body_over_download_warnsize_is_named_in_a_warning(site, make_downloader, caplog):
    downloader = make_downloader(warnsize=1000)
    with caplog.at_level(logging.WARNING, logger="batchd"):
        assert len(downloader.fetch(Request(site.url("/bytes/1000"))).content) == 1000
        assert caplog.records == []
        assert len(downloader.fetch(Request(site.url("/bytes/5000"))).content) == 5000
    assert [r.getMessage() for r in caplog.records] == \
        [f"{site.url('/bytes/5000')}: a body of 5000 bytes, over DOWNLOAD_WARNSIZE (1000)"]


def test_a_requests_maxsize_overrides_the_downloaders(site, make_downloader):
    downloader = make_downloader(maxsize=10_000)
    assert len(downloader.fetch(Request(site.url("/bytes/20000"), maxsize=30_000)).content) == 20_000
    failure = fail(downloader, Request(site.url("/bytes/5000"), maxsize=1000))
    assert "DOWNLOAD_MAXSIZE (1000 bytes)" in failure.reason


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    return self_signed_certificate(str(tmp_path_factory.mktemp("tls")))


@pytest.fixture
def tls_site(certificate):
    with TestSite(certificate=certificate) as site:
        yield site


def test_certificates_are_checked_unless_a_downloader_or_a_request_says_otherwise(tls_site, certificate,
                                                                                  make_downloader):
    url = tls_site.url("/page/1")
    failure = fail(make_downloader(), Request(url))
    assert failure.reason.startswith("SSLError") and failure.attempts == 1
    assert make_downloader(verify=False).fetch(Request(url)).css("h1::text").get() == "Title 1"
    assert make_downloader().fetch(Request(url, verify=certificate[0])).status_code == 200
    assert make_downloader().fetch(Request(url, verify=False)).status_code == 200


def test_tls_verify_off_is_said_once_when_a_worker_makes_its_downloader(caplog):
    with caplog.at_level(logging.WARNING, logger="batchd"):
        downloader_for(Settings(), 2, lambda seconds: False).close()
        assert caplog.records == []
        off = downloader_for(Settings(TLS_VERIFY=False, USER_AGENT=("a", "b")), 2, lambda seconds: False)
    assert [r.getMessage() for r in caplog.records] == \
        ["TLS_VERIFY is off: the certificates of https sites are not checked"]
    assert (off.verify, off.user_agents, off.max_redirects) == (False, ("a", "b"), 20)
    off.close()


# --- the spider's hooks, as the downloader calls them ------------------------------------

def test_prepare_runs_before_every_attempt_and_its_request_is_the_one_sent(site, make_downloader):
    attempts = []

    def prepare(request):
        attempts.append(request.url)
        return request.replace(headers={"X-Attempt": str(len(attempts))})

    def accept(request, response):
        return len(attempts) >= 3          # the first two pages are rejected

    response = make_downloader().fetch(Request(site.url("/echo")), prepare, accept)
    assert response.json()["headers"]["x-attempt"] == "3" and len(attempts) == 3
    assert make_downloader().fetch(Request(site.url("/echo")), lambda request: None).status_code == 200


def test_a_rejected_page_is_retried_like_a_503_then_fails_with_the_reason(site, make_downloader):
    failure = fail(make_downloader(max_retry_times=2), Request(site.url("/page/1")), None,
                   lambda request, response: response.css("h1::text").get() != "Title 1")
    assert failure.reason == "rejected by validate() after 3 attempts" and site.hits("/page/1") == 3
    assert failure.response_or_exception.css("h1::text").get() == "Title 1", "the last page rejected"

    def ban_page(request, response):
        raise LookupError("a captcha")
    failure = fail(make_downloader(max_retry_times=0), Request(site.url("/page/2")), None, ban_page)
    assert failure.reason == "rejected by validate(): LookupError: a captcha"
