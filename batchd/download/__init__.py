"""Downloading: the downloader, bodies, the DOWNLOADER_MIDDLEWARES chain; batchd's own links in middlewares/."""
