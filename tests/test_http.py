"""batchd/http.py: requests (their options, fingerprints, copies) and responses (decoding, selectors, links),
the pages fetched from a real local HTTP server (tests/httpserver.py)."""
import json
import re
import threading

import pytest
import requests

from batchd.http import FetchOptions, Request, Response, RetryOptions, RevalidateOptions
from httpserver import ENCODING_CASES

# --- decoding and parsing ------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(ENCODING_CASES))
def test_encoded_pages_decode_to_their_text(site, make_downloader, case):
    response = make_downloader().fetch(Request(site.url(f"/enc/{case}")))

    assert response.css("p::text").get() == ENCODING_CASES[case].text
    assert not response.text.startswith("\ufeff")


def test_declared_gbk_decodes_with_its_superset(site, make_downloader):
    response = make_downloader().fetch(Request(site.url("/enc/gbk-header")))

    assert response.encoding == "gb18030"
    assert "中文" in response.text


@pytest.mark.parametrize("case, codec", [("gb2312-header", "gb18030"), ("sjis-header", "cp932"),
                                         ("latin1-header", "cp1252"), ("bom-over-header", "utf-8")])
def test_labels_are_read_as_browsers_read_them(site, make_downloader, case, codec):
    assert make_downloader().fetch(Request(site.url(f"/enc/{case}"))).encoding == codec


def test_an_xml_declaration_names_the_encoding():
    xml = '<?xml version="1.0" encoding="gbk"?><items><item>中文</item></items>'
    response = response_of("application/xml", xml.encode("gbk"))

    assert response.encoding == "gb18030"
    assert response.xpath("//item/text()").get() == "中文"


def test_an_undeclared_json_body_is_read_as_utf8():
    response = response_of("application/json", json.dumps({"name": "中文 café"}, ensure_ascii=False).encode())

    assert response.encoding == "utf-8"
    assert response.json() == {"name": "中文 café"}


def test_selectors_and_regexes(site, make_downloader):
    request = Request(site.url("/page/3"), meta={"task_id": 7})
    response = make_downloader().fetch(request)

    assert response.request is request
    assert response.meta is request.meta
    assert response.headers["Content-Type"] == "text/html; charset=utf-8"
    assert response.content.startswith(b"<html>")
    assert response.css("h1::text").get() == "Title 3"
    assert response.xpath("//a/@href").get() == "/page/4"
    assert response.xpath("//p[@class=$name]/text()", name="n").get() == "3"
    assert response.re(r"Title (\d+)") == ["3"]
    assert response.re_first(r"Page (\d+)") == "3"
    assert response.re_first(r"Missing (\d+)", default="none") == "none"


def test_json_body(site, make_downloader):
    response = make_downloader().fetch(Request(site.url("/json")))

    assert response.json() == {"ok": True, "items": [1, 2, 3]}


# --- requests themselves -------------------------------------------------------------


def test_fingerprint_ignores_query_order_fragment_and_host_case():
    fingerprint = Request("http://Example.com/a?b=2&a=1#top").fingerprint()

    assert re.fullmatch(r"[0-9a-f]{40}", fingerprint), fingerprint    # a sha1 hex digest
    assert Request("http://example.com/a?a=1&b=3").fingerprint() != fingerprint
    assert Request("http://example.com/a?a=1&b=2").fingerprint() == fingerprint
    assert Request("http://example.com/a", params={"b": "2", "a": "1"}).fingerprint() == fingerprint
    assert Request("http://example.com/a?a=1", params=[("b", 2)]).fingerprint() == fingerprint


def test_fingerprint_ignores_percent_encoding_case_default_ports_and_idn_spelling():
    fingerprint = Request("http://example.com/r%C3%A9sum%C3%A9?q=%C3%A9&x=a+b").fingerprint()

    assert Request("http://example.com:80/r%c3%a9sum%c3%a9?x=a%20b&q=%c3%a9").fingerprint() == fingerprint
    assert Request("http://example.com/r\u00e9sum\u00e9", params={"q": "\u00e9", "x": "a b"}).fingerprint() == fingerprint
    assert Request("https://example.com:443/a").fingerprint() == Request("https://example.com/a").fingerprint()
    assert Request("http://example.com:8080/a").fingerprint() != Request("http://example.com/a").fingerprint()
    assert Request("https://example.com:80/a").fingerprint() != Request("https://example.com/a").fingerprint()
    assert Request("http://example.com/a?b=").fingerprint() != Request("http://example.com/a").fingerprint()
    assert Request("http://\u4f8b\u5b50.\u6d4b\u8bd5/a").fingerprint() == \
        Request("http://xn--fsqu00a.xn--0zwm56d/a").fingerprint()     # an IDN host and its punycode


def test_fingerprint_of_a_plain_url_is_the_one_it_had_before_w3lib():
    """The duplicate filter of a batch under way keeps knowing such URLs across the upgrade."""
    assert Request("http://example.com/a?b=2&a=1#top").fingerprint() == "9de71532c55c664c4372a4837f34b94402ccb411"


def test_fingerprint_tells_method_url_and_body_apart():
    base = Request("http://example.com/a", method="POST", json={"x": 1, "y": 2})

    assert Request("http://example.com/a", method="post", json={"y": 2, "x": 1}).fingerprint() == base.fingerprint()
    assert Request("http://example.com/a", json={"x": 1, "y": 2}).fingerprint() != base.fingerprint()
    assert Request("http://example.com/b", method="POST", json={"x": 1, "y": 2}).fingerprint() != base.fingerprint()
    assert Request("http://example.com/a", method="POST", json={"x": 2}).fingerprint() != base.fingerprint()
    assert Request("http://example.com/a", method="POST", data="x=1").fingerprint() != \
        Request("http://example.com/a", method="POST", data="x=2").fingerprint()


def test_request_defaults():
    first, second = Request("http://example.com/"), Request("http://example.com/")
    first.meta["seen"] = True

    assert second.meta == {}
    assert first.callback is None
    assert repr(first) == "<Request GET http://example.com/>"


def a_response(html: str, url: str = "http://x.invalid/") -> Response:
    return response_of("text/html; charset=utf-8", html.encode(), url)


def response_of(content_type: str, body: bytes, url: str = "http://x.invalid/") -> Response:
    raw = requests.Response()
    raw.status_code, raw.url, raw.headers["Content-Type"] = 200, url, content_type
    return Response(raw, Request(url), body)


def test_parsing_one_response_never_waits_for_another(monkeypatch):
    """No lock shared by every Response: a thread making one page's selector does not hold up another
    thread reading another page (functools.cached_property in Python 3.11 would)."""
    import batchd.http
    slow, fast = a_response("<p>slow</p>"), a_response("<p>fast</p>")
    inside, release = threading.Event(), threading.Event()
    real_selector = batchd.http.parsel.Selector

    def selector(text, **kwargs):
        if "slow" in text:
            inside.set()
            release.wait(30)
        return real_selector(text=text, **kwargs)

    monkeypatch.setattr(batchd.http.parsel, "Selector", selector)
    parsing = threading.Thread(target=lambda: slow.css("p"))
    parsing.start()
    try:
        assert inside.wait(10)
        done = threading.Event()
        threading.Thread(target=lambda: (fast.css("p::text").get(), done.set())).start()
        assert done.wait(5), "the second page waited for the first one's parse"
    finally:
        release.set()
        parsing.join(10)
    assert slow.css("p::text").get() == "slow" and fast.css("p::text").get() == "fast"


def test_setting_the_encoding_decodes_the_body_again():
    response = a_response("<p>caf\u00e9</p>")
    assert response.css("p::text").get() == "caf\u00e9"
    response.encoding = "latin-1"
    assert response.css("p::text").get() == "caf\u00c3\u00a9"


def test_an_unknown_encoding_fails_where_it_is_set():
    response = a_response("<p>caf\u00e9</p>")
    for codec in ("nonexistent-x", "base64"):
        with pytest.raises(LookupError, match=f"Response.encoding: '{codec}' is not a text codec"):
            response.encoding = codec
    assert response.text == "<p>caf\u00e9</p>"


# --- links ---------------------------------------------------------------------------

def links_page(site, make_downloader, query=""):
    return make_downloader().fetch(Request(site.url("/links" + query)))


def test_urljoin_resolves_against_the_page_and_its_base_href(site, make_downloader):
    page = links_page(site, make_downloader)
    assert page.urljoin("page/1") == site.url("/page/1")
    assert page.urljoin(" /page/2 ") == site.url("/page/2")
    assert page.urljoin("#os.error") == site.url("/links#os.error")
    assert page.urljoin("http://other.invalid/x") == "http://other.invalid/x"
    based = links_page(site, make_downloader, "?base=http://docs.invalid/v2/")
    assert based.base_url == "http://docs.invalid/v2/"
    assert based.urljoin("page/1") == "http://docs.invalid/v2/page/1"
    assert based.follow(based.css("a.spaced")[0]).url == "http://docs.invalid/page/2"


def test_follow_takes_a_url_an_element_or_an_attribute(site, make_downloader):
    page = links_page(site, make_downloader)
    by_url = page.follow("page/1", callback="parse_page", meta={"depth": 1}, cb_kwargs={"n": 1})
    assert (by_url.url, by_url.callback, by_url.meta, by_url.cb_kwargs) == \
        (site.url("/page/1"), "parse_page", {"depth": 1}, {"n": 1})
    assert page.follow(page.css("a.spaced")[0]).url == site.url("/page/2")
    assert page.follow(page.css("link[rel=next]")[0]).url == site.url("/page/9")
    assert page.follow(page.css("img")[0]).url == site.url("/page/3")
    assert page.follow(page.css("a.relative::attr(href)")[0]).url == site.url("/page/1")
    assert page.follow(page.xpath("//a[@class='gone']/@href")[0]).url == site.url("/status/404")
    with pytest.raises(ValueError, match="<a> element has no href"):
        page.follow(page.css("a.none")[0])
    with pytest.raises(ValueError, match="<title> element holds no link"):
        page.follow(page.css("title")[0])
    with pytest.raises(TypeError, match="use follow_all"):
        page.follow(page.css("a"))


def test_follow_all_follows_every_link_selected_and_skips_elements_without_one(site, make_downloader):
    page = links_page(site, make_downloader)
    expected = [site.url(path) for path in ("/page/1", "/page/2", "/links#os.error", "/status/404")]
    assert [r.url for r in page.follow_all(css="a")] == expected
    assert [r.url for r in page.follow_all(xpath="//a/@href")] == expected
    assert [r.url for r in page.follow_all(["page/1", page.css("img")[0]], callback="p")] == \
        [site.url("/page/1"), site.url("/page/3")]
    assert {r.callback for r in page.follow_all(css="a", callback="p")} == {"p"}
    with pytest.raises(ValueError, match="exactly one of urls, css and xpath"):
        page.follow_all(css="a", xpath="//a")
    with pytest.raises(ValueError, match="exactly one of urls, css and xpath"):
        page.follow_all()


def test_replace_copies_every_argument_but_those_changed():
    original = Request("http://x.invalid/a", callback="parse", method="post", headers={"X": "1"},
                       data={"q": "1"}, meta={"k": 1}, cb_kwargs={"n": 1}, errback="failed", dont_filter=True,
                       timeout=3, max_retry_times=2, cert="client.pem")
    copy = original.replace(url="http://x.invalid/b", meta={"k": 2})
    assert (copy.url, copy.meta, original.url, original.meta) == ("http://x.invalid/b", {"k": 2}, "http://x.invalid/a",
                                                                  {"k": 1})
    for name in ("callback", "method", "headers", "data", "cb_kwargs", "errback", "dont_filter", "timeout",
                 "max_retry_times", "kwargs"):
        assert getattr(copy, name) == getattr(original, name), name
    copy.cb_kwargs["n"] = 9
    assert original.cb_kwargs == {"n": 1}, "the copy's cb_kwargs are its own"
    assert original.replace(cert="other.pem").kwargs == {"cert": "other.pem"}, "requests' own arguments too"



def test_options_come_in_groups_and_todays_keywords_still_fill_them():
    grouped = Request("http://x.invalid/", fetch=FetchOptions(timeout=3, headers={"X": "1"}),
                      retry=RetryOptions(max_retry_times=2), revalidation=RevalidateOptions(revalidate=False))
    flat = Request("http://x.invalid/", timeout=3, headers={"X": "1"}, max_retry_times=2, revalidate=False)
    for request in (grouped, flat):
        assert (request.fetch.timeout, request.fetch.headers, request.retry.max_retry_times,
                request.revalidation.revalidate) == (3, {"X": "1"}, 2, False)
        assert (request.timeout, request.headers, request.max_retry_times, request.revalidate) == (3, {"X": "1"}, 2, False)
    assert Request("http://x.invalid/", fetch=FetchOptions(timeout=3), timeout=5).fetch.timeout == 5, \
        "a keyword wins over its group"
    flat.proxy = "http://proxy.invalid:3128"           # set as an attribute (a download_midware does): in its group
    assert flat.fetch.proxy == "http://proxy.invalid:3128"
    assert Request("http://x.invalid/", cert="/c.pem").fetch.extra == {"cert": "/c.pem"}, "the rest goes to requests"


def test_replace_gives_the_copy_groups_of_its_own():
    original = Request("http://x.invalid/", timeout=3, cert="/c.pem", on_unchanged="same")
    copy = original.replace(timeout=4)
    copy.fetch.extra["cert"] = "/d.pem"
    copy.revalidation.on_unchanged = "other"
    assert (original.fetch.timeout, original.fetch.extra, original.revalidation.on_unchanged) == \
        (3, {"cert": "/c.pem"}, "same")
    assert copy.fetch.timeout == 4


def test_an_unknown_keyword_is_an_error_naming_it_not_a_silent_pass_through():
    with pytest.raises(TypeError, match=r"^Request: unknown keyword 'render_wiat'; did you mean 'render_wait'\?$"):
        Request("http://x.invalid/", render=True, render_wiat=".price")
    with pytest.raises(TypeError, match=r"^Request: unknown keyword 'zzz'; Request's keywords: headers, .*, files, "
                                        r"cert, hooks$"):
        Request("http://x.invalid/", zzz=1)
    with pytest.raises(ValueError, match=r'render=.yes.: write True, False or "auto"'):
        Request("http://x.invalid/", render="yes")
    with pytest.raises(ValueError, match="render_wait=-1: a CSS selector, or seconds"):
        Request("http://x.invalid/", render=True, render_wait=-1)
    rendered = Request("http://x.invalid/", render="auto", render_wait=2, render_timeout=9)
    assert (rendered.render, rendered.rendering.render_wait, rendered.render_timeout) == ("auto", 2, 9)
    assert rendered.replace(url="http://x.invalid/b").rendering == rendered.rendering
