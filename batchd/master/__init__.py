"""The master: the patrol that opens, refills, reclaims, measures and closes batches; the walks of the task table."""
