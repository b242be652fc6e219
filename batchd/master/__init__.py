"""The master: the patrol that opens, refills, reclaims, measures and closes batches, the lock it patrols under, and the walks of the task table."""
