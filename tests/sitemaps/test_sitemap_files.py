"""Reading one sitemap or robots.txt as a stream (batchd/sitemaps/sitemap_files.py), from a real HTTP server on
loopback: <lastmod> read as the W3C datetime it is, the scope a sitemap's URLs must stay in, gzip by its magic
bytes, the protocol's 50 MB cut, bad XML and HTTP errors as one SitemapError, USER_AGENT sent."""
import gzip
import json

import pytest

from batchd.config import load_settings
from batchd.sitemaps import sitemap_files
from batchd.sitemaps.sitemap_files import Entry, Scope, SitemapError, SitemapReader, parse_lastmod
from sitemap_texts import sitemap_index, urlset


@pytest.fixture
def reader():
    reader = SitemapReader(load_settings({"USER_AGENT": "sitemap-tester/1"}))
    yield reader
    reader.close()


@pytest.mark.parametrize("text, expected", [
    ("2024-03-05", 1709596800.0), ("2024-03", 1709251200.0), ("2024", 1704067200.0),
    ("2024-03-05T10:00:00Z", 1709632800.0), ("2024-03-05T11:00:00+01:00", 1709632800.0),
    ("2024-03-05T10:00:00.5Z", 1709632800.5), ("2024-03-05T10:00:00", 1709632800.0),
    (" 2024-03-05 \n", 1709596800.0), ("yesterday", None), ("", None)])
def test_lastmod_is_read_as_a_w3c_datetime(text, expected):
    assert parse_lastmod(text) == expected


def test_a_sitemap_holds_only_urls_under_its_own_folder_unless_robots_named_it():
    own = Scope.of_sitemap("https://Example.com/shop/sitemap.xml")
    assert own.holds("https://example.com/shop/a") and own.holds("HTTPS://EXAMPLE.COM/shop/b/c")
    assert not own.holds("https://example.com/blog/a") and not own.holds("http://example.com/shop/a")
    assert not own.holds("https://other.example/shop/a") and not own.holds("https://example.com/shopping")
    named = Scope.of_robots("https://example.com/robots.txt")
    assert named.holds("https://example.com/blog/a") and not named.holds("https://other.example/a")
    # an index robots.txt named vouches for its sitemaps; an index of no robots.txt does not
    assert named.for_child("https://example.com/maps/1.xml") is named
    assert own.for_child("https://example.com/shop/maps/1.xml") == Scope("https://example.com/shop/maps/")


def test_entries_stream_from_a_sitemap_plain_or_gzipped_and_from_an_index(site, reader):
    site.files["plain.xml"] = urlset([(site.url("/a"), "2024-01-02"), (site.url("/b"), None)])
    site.files["packed.xml.gz"] = gzip.compress(urlset([site.url("/c")]))
    site.files["index.xml"] = sitemap_index([site.url("/files/plain.xml")])
    assert list(reader.entries(site.url("/files/plain.xml"))) == [
        Entry("url", site.url("/a"), 1704153600.0), Entry("url", site.url("/b"))]
    assert list(reader.entries(site.url("/files/packed.xml.gz"))) == [Entry("url", site.url("/c"))]
    assert list(reader.entries(site.url("/files/index.xml"))) == [Entry("sitemap", site.url("/files/plain.xml"))]


def test_what_cannot_be_read_is_one_error_and_what_came_before_stays_read(site, reader, monkeypatch):
    site.files["cut.xml"] = urlset([site.url("/a"), site.url("/b")])[:-30]
    site.files["page.xml"] = b"<html><body>not a sitemap</body></html>"
    site.files["bad.xml.gz"] = b"\x1f\x8b" + b"garbage" * 10
    got = []
    with pytest.raises(SitemapError, match="not well-formed XML"):
        got.extend(reader.entries(site.url("/files/cut.xml")))
    assert got == [Entry("url", site.url("/a"))]
    with pytest.raises(SitemapError, match=r"not a sitemap: its root element is <html>"):
        list(reader.entries(site.url("/files/page.xml")))
    with pytest.raises(SitemapError, match="bad gzip data"):
        list(reader.entries(site.url("/files/bad.xml.gz")))
    with pytest.raises(SitemapError, match="^HTTP 404$"):
        list(reader.entries(site.url("/files/none.xml")))
    monkeypatch.setattr(sitemap_files, "MOST_BYTES", 4096)
    site.files["big.xml.gz"] = gzip.compress(urlset([site.url(f"/{n}") for n in range(400)]))
    with pytest.raises(SitemapError, match="over 0 MB uncompressed, the protocol's limit"):
        list(reader.entries(site.url("/files/big.xml.gz")))


def test_robots_txt_names_sitemaps_and_the_user_agent_is_ours(site, reader):
    site.robots_txt = "User-agent: *\nDisallow: /private\nSitemap: /files/a.xml\nSitemap: https://example.com/b.xml\n"
    assert reader.robots_sitemaps(site.url("/robots.txt")) == [site.url("/files/a.xml"), "https://example.com/b.xml"]
    echoed = json.loads(b"".join(reader._body(site.url("/echo"), 10_000)))
    assert echoed["headers"]["user-agent"] == "sitemap-tester/1"
