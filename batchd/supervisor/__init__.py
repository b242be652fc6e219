"""The supervisor: fork, reap, respawn, signals, systemd; its children; /metrics and the status snapshots."""
