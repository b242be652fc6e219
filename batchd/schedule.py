"""When the next batch is due, on the store's clock (docs/architecture.md, A batch's life).

With unit `day` the next batch is due on the date BATCH_INTERVAL days after the current
batch's date (at 00:00); with unit `hour`, at the hour BATCH_INTERVAL hours after its hour.
So a daily cron at 02:00 with an interval of 1 day opens a batch every day.
"""
from datetime import datetime, timedelta


def next_due(batch, interval: int, unit: str) -> datetime:
    if unit == "hour":
        return batch.batch_date.replace(minute=0, second=0, microsecond=0) + timedelta(hours=interval)
    return datetime.combine(batch.batch_date.date(), datetime.min.time()) + timedelta(days=interval)


def is_due(batch, now: datetime, settings) -> bool:
    """No batch yet is due; otherwise the calendar rule with the current settings."""
    return batch is None or now >= next_due(batch, settings.BATCH_INTERVAL, settings.BATCH_INTERVAL_UNIT)
