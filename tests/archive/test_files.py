"""The archive's files (issue 36, point 1): the body kept as it came, one open file per process rotated past its
size and at a batch change, and a torn last record (a writer killed mid-write) that a reader passes over and the
next start cuts off."""
import glob
import gzip
import os
import time

import pytest

from batchd.archive.files import ProcessFiles, whole_length
from batchd.archive.records import fetch_records
from batchd.archive.replay import ArchiveReplay
from batchd.archive.writer import ArchiveWriter
from batchd.config import load_settings
from batchd.download.downloader import Downloader
from batchd.http import Request
from httpserver import COMPRESSIBLE_PAGE

warcio_checker = pytest.importorskip("warcio.checker")
from warcio.archiveiterator import ArchiveIterator  # noqa: E402


@pytest.fixture
def fetch(site):
    downloader = Downloader()
    downloader.keep_received = True
    yield lambda path: downloader.fetch(Request(site.url(path)))
    downloader.close()


def settings_at(tmp_path):
    return load_settings({"ARCHIVE": "warc", "ARCHIVE_PATH": str(tmp_path)}, environ={})


def members(response, batch_id=1):
    return fetch_records(response, batch_id, time.time(), None, False)


def warc_files(root, suffix=".warc.gz"):
    return sorted(glob.glob(os.path.join(root, "t", "*", "*" + suffix)))


def checked(path):
    assert warcio_checker.Checker(type("Args", (), {"inputs": [path], "verbose": False})()).process_all() == 0


def test_a_body_is_kept_content_coded_as_it_came_and_a_redirect_as_its_own_records(fetch, tmp_path, site):
    files = ProcessFiles(str(tmp_path), "t", 1 << 30)
    files.append(1, members(fetch("/compressed/gzip")))
    files.append(1, members(fetch("/redirect?to=/page/1")))
    files.close()
    [path] = warc_files(str(tmp_path))
    checked(path)
    with open(path, "rb") as warc:
        records = [(r.rec_type, r.rec_headers.get_header("WARC-Target-URI"), r.http_headers, r.raw_stream.read())
                   for r in ArchiveIterator(warc)]
    kept = [(kind, url, headers.get_header("Content-Encoding"), body) for kind, url, headers, body in records
            if kind == "response"]
    assert kept[0][:3] == ("response", site.url("/compressed/gzip"), "gzip")
    assert gzip.decompress(kept[0][3]) == COMPRESSIBLE_PAGE          # as it came: still gzipped
    assert [(kind, url) for kind, url, _, _ in kept[1:]] == [("response", site.url("/redirect?to=/page/1")),
                                                            ("response", site.url("/page/1"))]
    replay = ArchiveReplay(settings_at(tmp_path), "t", 1)
    assert replay.find("GET", site.url("/compressed/gzip")).body == COMPRESSIBLE_PAGE   # decoded for a callback
    page = replay.find("GET", site.url("/redirect?to=/page/1"))     # the URL asked finds where it led
    assert (page.status, page.url) == (200, site.url("/page/1"))


def test_one_file_open_at_a_time_rotated_past_its_size_and_at_a_batch_change(fetch, tmp_path):
    page = members(fetch("/page/1"))
    size = sum(len(member) for member, _ in page)
    files = ProcessFiles(str(tmp_path), "t", 3 * size)
    for _ in range(5):
        files.append(1, members(fetch("/page/1")))
        assert len(warc_files(str(tmp_path), ".open")) == 1
    files.append(2, members(fetch("/page/2"), batch_id=2))
    files.close()
    closed = warc_files(str(tmp_path))
    assert [os.path.basename(os.path.dirname(p)) for p in closed] == ["00000001"] * 3 + ["00000002"]
    assert not warc_files(str(tmp_path), ".open")
    for path in closed:
        checked(path)
        assert os.path.getsize(path) <= 3 * size + 2048          # (its warcinfo record besides)
        assert os.path.exists(path[:-len(".warc.gz")] + ".cdxj")


def test_a_torn_last_record_is_passed_over_by_a_reader_and_cut_off_at_the_next_start(fetch, tmp_path, site):
    files = ProcessFiles(str(tmp_path), "t", 1 << 30)
    for n in (1, 2):
        files.append(1, members(fetch(f"/page/{n}")))
    torn = members(fetch("/page/3"))
    [open_path] = warc_files(str(tmp_path), ".open")
    os.close(files.current.fd)          # the writer is killed: its lock goes, its file stays open-named...
    with open(open_path, "ab") as warc:     # ... after half a record
        warc.write(torn[0][0] + torn[1][0][:len(torn[1][0]) // 2])
    fd = os.open(open_path, os.O_RDONLY)
    whole = whole_length(fd)
    os.close(fd)
    settings = settings_at(tmp_path)
    replay = ArchiveReplay(settings, "t", 1)
    assert replay.find("GET", site.url("/page/2")).status == 200 and replay.find("GET", site.url("/page/3")) is None

    [index] = glob.glob(os.path.join(str(tmp_path), "t", "*", "*.cdxj"))
    with open(index) as lines:
        written = lines.read()
    ArchiveWriter(settings, "t").cut_torn_files()        # the next worker's first record
    [path] = warc_files(str(tmp_path))
    assert os.path.getsize(path) == whole and not warc_files(str(tmp_path), ".open")
    with open(index) as lines:
        assert lines.read() == written                   # the index again, from the records: the same lines
    checked(path)
    replay = ArchiveReplay(settings, "t", 1)
    assert [replay.find("GET", site.url(f"/page/{n}")).status for n in (1, 2)] == [200, 200]
