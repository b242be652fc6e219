"""What makes every batchd process a well-behaved service, below the roles: its threads under one guard
(threads.py), how it is told to stop and spaces its retries (lifecycle.py), how it waits out an outage of
MySQL, Redis or an SQLite file (outages.py), and what it says to systemd and the journal (systemd.py)."""
