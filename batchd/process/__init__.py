"""What every batchd process shares, below the roles: threads and their guard, stops and backoffs, outages,
systemd and logging, the ledger and alerts."""
