"""batchd's own downloader middlewares, one file each (DOWNLOADER_MIDDLEWARES names them by dotted path)."""
