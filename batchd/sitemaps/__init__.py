"""Sitemaps as a source of tasks: reading robots.txt's Sitemap: lines, sitemap indexes and (gzipped) sitemaps
as streams, and adding one task per new URL (`batchd tasks import-sitemap`, SITEMAPS at each batch's opening)."""
