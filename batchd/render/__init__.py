"""Pages that need a browser: Request(render=True) loaded in a bounded pool of Chromium browsers (pool.py),
driven through Selenium and CDP (chromium.py), behind batchd's own small interface (renderer.py)."""
