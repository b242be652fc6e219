"""Sitemaps as a site serves them, for the tests of batchd/sitemaps/: a <urlset> and a <sitemapindex> of given
entries, as bytes."""
NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'


def urlset(urls, lastmod=None) -> bytes:
    """A sitemap of `urls` (each with <lastmod> `lastmod`, or that of the (url, lastmod) pairs given)."""
    pairs = [(url, lastmod) if isinstance(url, str) else url for url in urls]
    entries = "".join(f"<url><loc>{url}</loc>{f'<lastmod>{mod}</lastmod>' if mod else ''}</url>" for url, mod in pairs)
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset {NS}>{entries}</urlset>'.encode()


def sitemap_index(urls) -> bytes:
    entries = "".join(f"<sitemap><loc>{url}</loc></sitemap>" for url in urls)
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<sitemapindex {NS}>{entries}</sitemapindex>'.encode()
