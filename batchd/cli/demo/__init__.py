"""`batchd demo`: a whole batch on a bundled site, with no network, no MySQL and no Redis."""
