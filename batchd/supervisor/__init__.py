"""The supervisor: fork, reap, respawn, signals, escalation, systemd; its children. What it reports, reporting/ makes."""
