"""ProgressRate: settled tasks per second over its window, and the ETA the master and the supervisor's report show."""
from batchd.settle import progress_rate
from batchd.settle.progress_rate import RATE_WINDOW, ProgressRate, eta_words


def rate_at(monkeypatch, samples: list) -> ProgressRate:
    """A ProgressRate fed (second, settled) samples on a clock the test sets."""
    rate = ProgressRate()
    for at, settled in samples:
        monkeypatch.setattr(progress_rate.time, "monotonic", lambda at=at: at)
        rate.add(settled)
    return rate


def test_the_rate_is_the_settled_tasks_over_the_window_and_older_samples_leave(monkeypatch):
    rate = rate_at(monkeypatch, [(0.0, 0), (10.0, 100), (20.0, 300)])
    assert rate.per_second() == 15.0
    rate = rate_at(monkeypatch, [(0.0, 0), (10.0, 1000), (10.0 + RATE_WINDOW, 1000 + 5 * RATE_WINDOW)])
    assert rate.per_second() == 5.0          # the first sample is out of the window


def test_the_eta_reads_minutes_or_hours(monkeypatch):
    assert (eta_words(15), eta_words(3660.5)) == ("0m15s", "1h01m")
    rate = rate_at(monkeypatch, [(0.0, 0), (10.0, 100)])
    rate.clear()
    assert rate.per_second() == 0.0
