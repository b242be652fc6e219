"""The archive's writer in a worker (issue 36, point 1): off by default, and without warcio one line saying what
to install, for the worker and for a reader alike."""
import sys

import pytest

from batchd.archive.replay import ArchiveReplay
from batchd.archive.writer import ArchiveWriter
from batchd.config import load_settings
from batchd.errors import ConfigError


def test_off_by_default_and_without_warcio_one_line_says_what_to_install(monkeypatch, tmp_path):
    assert ArchiveWriter.for_worker(load_settings(environ={}), "t") is None
    monkeypatch.setitem(sys.modules, "warcio", None)        # as if it were not installed
    settings = load_settings({"ARCHIVE": "warc", "ARCHIVE_PATH": str(tmp_path)}, environ={})
    line = "ARCHIVE = \"warc\" needs warcio: pip install 'batchd[archive]' (or pip install warcio)"
    with pytest.raises(ConfigError) as refused:
        ArchiveWriter.for_worker(settings, "t")
    assert str(refused.value) == line
    with pytest.raises(ConfigError, match="needs warcio"):
        ArchiveReplay(settings, "t", 1)


def test_an_archive_path_under_systemd_is_in_its_state_directory(monkeypatch):
    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/batchd:/var/lib/other")
    assert load_settings(environ={}).archive_path() == "/var/lib/batchd/archive"
    assert load_settings({"ARCHIVE_PATH": "/data/warc"}, environ={}).archive_path() == "/data/warc"
