"""Re-crawls that move only what changed (issue 21, docs/recrawl.md).

    pages.py      what one request found (a PageVisit: new, changed, unchanged, gone), the validators a
                  conditional request sends, as a browser cache would (Vary, redirects), and signatures
    revisits.py   when a task is due again (BATCH_MODE = "due"): Nutch's adaptive interval
    page_memory.py  the worker's side: a page's record looked up before its request, what the task found
                  kept at its write-back, after its items landed
    spider_print.py  the spider's print: a batch, or a page, whose spider changed trusts no validator (issue 33)

What is kept lives in the store, in two tables of batchd's own beside the task table (`<table>_page`,
`<table>_revisit`; backends/store.py, BatchStore.keeps_pages); the user's tables are never altered.
"""
