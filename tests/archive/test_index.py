"""What a lookup gets from a batch's index (issue 36, point 1): the newest record of a request, a render="auto"
sample's plain half only when nothing else is there, and a revisit's target: the newest response of its URL, in
an earlier batch, fetched no later than the revisit's WARC-Refers-To-Date."""
import time

import pytest

from batchd.archive.files import ProcessFiles, batch_folder
from batchd.archive.index import FolderIndex, revisit_target
from batchd.archive.records import fetch_records
from batchd.download.downloader import Downloader
from batchd.http import Request

pytest.importorskip("warcio")


def test_the_newest_record_but_a_sample_and_a_revisit_finds_the_response_it_stands_for(site, tmp_path):
    downloader = Downloader()
    downloader.keep_received = True
    page = downloader.fetch(Request(site.url("/page/1")))
    downloader.close()
    files, t = ProcessFiles(str(tmp_path), "t", 1 << 30), time.time()
    for batch_id, when, sample in ((1, t, False), (1, t + 10, False), (1, t + 20, True), (2, t + 30, False)):
        files.append(batch_id, fetch_records(page, batch_id, when, None, sample))
    files.close()
    first = FolderIndex(batch_folder(str(tmp_path), "t", 1))
    assert first.find("GET", page.url)["date"].startswith(time.strftime("%Y-%m-%dT%H:%M", time.gmtime(t + 10)))
    assert not first.find("GET", page.url).get("sample")

    def revisit(refers_to: float) -> dict:
        return {"url": page.url, "refers_to_date": fetch_records(page, 3, refers_to, None, False)[1][1]["date"]}
    indexes = {b: FolderIndex(batch_folder(str(tmp_path), "t", b)) for b in (1, 2)}
    for refers_to, found in ((t + 5, (1, t)), (t + 25, (1, t + 10)), (t + 35, (2, t + 30)), (t - 5, None)):
        target = revisit_target(revisit(refers_to), 3, [1, 2], indexes.__getitem__)
        expected = None if found is None else (found[0], fetch_records(page, 1, found[1], None, False)[1][1]["date"])
        assert (target and (target[0], target[1]["date"])) == expected, refers_to
    assert revisit_target(revisit(t + 35), 2, [1, 2], indexes.__getitem__)[0] == 1    # only earlier batches
