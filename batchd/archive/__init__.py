"""The archive: every response a batch fetches kept as WARC/1.1 records (ARCHIVE = "warc", docs/recrawl.md)."""
