"""Downloader middlewares the tests name in DOWNLOADER_MIDDLEWARES (an importable dotted path)."""
import batchd


class TokenMiddleware(batchd.DownloaderMiddleware):
    """Signs every request: the header a site sees, set by the chain rather than by the spider."""

    def process_request(self, request):
        return request.replace(headers={**(request.headers or {}), "X-Token": "from-middleware"})


class NotAMiddleware:
    pass
