"""Alerts: what an operator must hear of without reading the progress lines (alerts.py), and the
webhooks they are POSTed to (webhooks.py)."""
