"""Per-host terms (hosts/terms.py, HOSTS: [hosts."example.com"] tables): their parsing and its
one-line errors, the matching of a host to its table, and a worker's downloader (assembly.downloader_for)
keeping one host's delay, headers and timeout and not the other's, at the local site: 127.0.0.1 and
localhost are two hosts of one server. `batchd check` lists the terms, the proxy's password redacted."""

import pytest

from batchd.hosts.rates import LocalHostRates
from batchd.config import load_settings
from batchd.download.chain import sleep_without_stop
from batchd.hosts.terms import HostTerms, Terms
from batchd.errors import ConfigError
from batchd.http import Request, RequestFailed
from batchd.assembly import downloader_for

from harness import fetch_all
from pacing import SEND_JITTER
from supervised import SEED, batchd


def settings_from(tmp_path, text, **environ):
    path = tmp_path / "batchd.toml"
    path.write_text(text)
    return load_settings(config_files=str(path), environ=environ)


def test_host_tables_from_a_file_with_keys_of_every_type(tmp_path):
    settings = settings_from(tmp_path, '[hosts."A.example.com"]\nrate = 2\nburst = 3\nconcurrency = 1\ndelay = 0.5\n'
                                       'timeout = 4\ndownload_timeout = 9\nproxy = "http://u:p@proxy:3128"\n'
                                       'headers = { X-Site = "a" }\n[hosts."*.example.com"]\ndelay = 1\n')
    assert settings.HOSTS == {"a.example.com": {"rate": 2.0, "burst": 3, "concurrency": 1, "delay": 0.5,
                                                "timeout": 4.0, "download_timeout": 9.0,
                                                "proxy": "http://u:p@proxy:3128", "headers": {"X-Site": "a"}},
                              "*.example.com": {"delay": 1.0}}
    assert load_settings({"HOSTS": settings.HOSTS}, environ={}).HOSTS == settings.HOSTS    # __custom_setting__
    assert load_settings(environ={"BATCHD_HOSTS": '{"b.com": {"delay": 2}}'}).HOSTS == {"b.com": {"delay": 2.0}}


@pytest.mark.parametrize("table, message", [
    ('[hosts."a.com"]\nrate = -1', r'^.*batchd\.toml: \[hosts\."a\.com"\] rate: must be a number from 0 to 100000, got -1$'),
    ('[hosts."a.com"]\nrate = "fast"', r'\[hosts\."a\.com"\] rate: must be a number from 0 to 100000'),
    ('[hosts."a.com"]\nburst = 0', r'\[hosts\."a\.com"\] burst: must be an integer from 1 to 10000, got 0$'),
    ('[hosts."a.com"]\nspeed = 1', r'\[hosts\."a\.com"\] speed: unknown; a host\'s terms are rate, burst'),
    ('[hosts."a.com"]\nheaders = 3', r'\[hosts\."a\.com"\] headers: must be a table of texts'),
    ('[hosts."a.com"]\nproxy = "nowhere"', r'\[hosts\."a\.com"\] proxy: must be a proxy URL'),
    ('[hosts."a b.com"]\ndelay = 1', r'\[hosts\."a b\.com"\]: not a host name, or \*\. and a domain'),
    ('[hosts."*"]\ndelay = 1', r'\[hosts\."\*"\]: not a host name'),
    ('[hosts."a.*.com"]\ndelay = 1', r'\[hosts\."a\.\*\.com"\]: not a host name'),
])
def test_a_bad_host_table_is_one_line_naming_the_file_the_table_and_the_key(tmp_path, table, message):
    with pytest.raises(ConfigError, match=message) as caught:
        settings_from(tmp_path, table + "\n")
    assert "\n" not in str(caught.value) and "batchd.toml" in str(caught.value)


def test_an_exact_host_beats_the_longest_wildcard_which_beats_a_shorter_one():
    terms = HostTerms(Terms(delay=0.0), {"example.com": {"delay": 1.0}, "*.example.com": {"delay": 2.0},
                                         "*.b.example.com": {"delay": 3.0}, "x.b.example.com": {"delay": 4.0}})
    delays = {host: terms.for_host(host).delay for host in (
        "example.com", "a.example.com", "a.b.example.com", "b.example.com", "x.b.example.com", "example.org",
        "notexample.com")}
    assert delays == {"example.com": 1.0, "a.example.com": 2.0, "a.b.example.com": 3.0, "b.example.com": 2.0,
                      "x.b.example.com": 4.0, "example.org": 0.0, "notexample.com": 0.0}
    assert terms.for_url("http://A.B.Example.com:8080/x").delay == 3.0      # by name, the port aside
    assert HostTerms(Terms(delay=0.5)).for_url("http://anything/").delay == 0.5


def test_a_wildcard_does_not_match_its_own_domain():
    terms = HostTerms(Terms(), {"*.example.com": {"concurrency": 1}})
    assert terms.for_host("example.com").concurrency == 8 and terms.for_host("w.example.com").concurrency == 1


def test_the_resolved_hosts_are_bounded():
    terms = HostTerms(Terms(), {"*.example.com": {"delay": 1.0}}, kept=3)
    for n in range(10):
        assert terms.for_host(f"h{n}.example.com").delay == 1.0
    assert len(terms._resolved) <= 3




def test_one_hosts_delay_holds_at_it_and_not_at_the_other(site, sends, tmp_path):
    settings = settings_from(tmp_path, '[hosts."localhost"]\ndelay = 0.15\n', BATCHD_RANDOMIZE_DOWNLOAD_DELAY="false")
    downloader = downloader_for(settings, threads=8, sleep=sleep_without_stop)
    slow = [site.url(f"/page/{n}").replace("127.0.0.1", "localhost") for n in range(4)]
    fast = [site.url(f"/page/{n}") for n in range(10, 14)]
    fetch_all(downloader, slow + fast)
    # When the downloader sent them (tests/pacing.py), not when the site's thread saw them come.
    starts = {"slow": sends.starts(host="localhost"), "fast": sends.starts(host="127.0.0.1")}
    gaps = {host: [b - a for a, b in zip(at, at[1:])] for host, at in starts.items()}
    assert len(starts["slow"]) == len(starts["fast"]) == 4
    assert min(gaps["slow"]) >= 0.15 - SEND_JITTER, gaps
    # All four without waiting: kept to the delay they would take 0.45 s at least.
    assert max(starts["fast"]) - min(starts["fast"]) < 0.3, gaps
    downloader.close()


def test_one_hosts_rate_holds_at_it_and_not_at_the_other(site, sends, tmp_path):
    settings = settings_from(tmp_path, '[hosts."localhost"]\nrate = 5\n')
    downloader = downloader_for(settings, threads=1, sleep=sleep_without_stop, host_rates=LocalHostRates())
    for n in range(3):
        downloader.fetch(Request(site.url(f"/page/{n}").replace("127.0.0.1", "localhost")))
    for n in range(10, 13):
        downloader.fetch(Request(site.url(f"/page/{n}")))
    slow, fast = sends.starts(host="localhost"), sends.starts(host="127.0.0.1")
    # A rate books slots 1/rate apart and each request waits for its slot: the n-th goes n slots after the first
    # (which waits for none). Two neighbours may stand closer than a slot when the first of them was late (its
    # wait overslept on a busy machine) and the next one on time: the rate still holds.
    assert len(slow) == 3 and all(at - slow[0] >= n * 0.2 - SEND_JITTER for n, at in enumerate(slow)), slow
    assert fast[-1] - fast[0] < 0.3, fast        # kept to the rate, at least 0.4 s
    downloader.close()


def test_one_hosts_headers_and_timeout(site, tmp_path):
    # A timeout of 1 s: a busy machine's site (a thread of this process) may take a few hundred ms to answer at all.
    settings = settings_from(tmp_path, '[hosts."localhost"]\ntimeout = 1.0\nheaders = { X-Host-Terms = "yes" }\n',
                             BATCHD_SPIDER_MAX_RETRY_TIMES="0")
    downloader = downloader_for(settings, threads=1, sleep=sleep_without_stop)
    other = site.url("/echo").replace("127.0.0.1", "localhost")
    assert downloader.fetch(Request(other)).json()["headers"]["x-host-terms"] == "yes"
    assert "x-host-terms" not in downloader.fetch(Request(site.url("/echo"))).json()["headers"]
    assert downloader.fetch(Request(other, headers={"X-Host-Terms": "mine"})).json()["headers"]["x-host-terms"] == "mine"
    with pytest.raises(RequestFailed, match="Timeout"):
        downloader.fetch(Request(site.url("/slow?seconds=1.5").replace("127.0.0.1", "localhost")))
    assert downloader.fetch(Request(site.url("/slow?seconds=1.5"))).status_code == 200
    downloader.close()


def test_check_lists_the_terms_with_the_proxys_password_redacted(mysql_backend, tmp_path):
    config = tmp_path / "batchd.toml"
    config.write_text('[hosts."*.example.com"]\ndelay = 1.5\nproxy = "http://crawler:secret@proxy.example.com:3128"\n'
                      'headers = { Referer = "https://www.example.com/" }\n')
    out = batchd("check", SEED, "--config", str(config), backend=mysql_backend).stdout
    assert "TERMS every host " in out
    line = next(line for line in out.splitlines() if line.startswith("TERMS *.example.com"))
    assert "delay 1.5 s" in line and "proxy http://crawler:***@proxy.example.com:3128" in line, line
    assert "headers Referer" in line and "secret" not in out
