"""What follows a child's end (supervisor/respawn.py), decided without forking: a child that had served is
replaced at once, one that died before serving after a backoff, a configuration error three times in a row
stops the supervisor with 78, a once-mode end stops it with the child's code; a child told to stop is no
restart."""
import multiprocessing
import time

from batchd.errors import ExitCode
from batchd.supervisor.child import Child, ChildSpec, Plan, Seats
from batchd.supervisor.respawn import CONFIG_ATTEMPTS, STABLE_AFTER, after_end


def a_child(role: str = "worker", spawned_at: float = 0.0) -> Child:
    spec = ChildSpec(role=role, number=1, row=0, once=False, keep_alive=True, name=f"{role} 1", title="t")
    process = multiprocessing.get_context("fork").Process(target=time.sleep)      # never started: no end to reap
    return Child(spec=spec, process=process, spawned_at=spawned_at)


def test_a_child_that_served_is_replaced_at_once_one_that_did_not_after_a_backoff():
    seats = Seats(wanted=2)
    served = after_end(Plan("run"), seats, a_child(), 1, now=1.0, served=True)
    assert (served.tail, served.stop, served.restart) == ("; a new worker now (it had served)", None, True)
    crashed = after_end(Plan("run"), seats, a_child(), 1, now=1.0, served=False)
    assert crashed.tail.startswith("; a new worker in ") and crashed.restart and seats.next_spawn > 1.0


def test_configuration_errors_in_a_row_stop_the_supervisor_with_78():
    seats = Seats(wanted=1)
    ends = [after_end(Plan("run"), seats, a_child(spawned_at=float(n)), ExitCode.CONFIG, now=n + 0.5, served=False)
            for n in range(CONFIG_ATTEMPTS)]
    assert [end.stop for end in ends[:-1]] == [None] * (CONFIG_ATTEMPTS - 1)
    assert ends[0].tail.startswith(f"; configuration error 1 of {CONFIG_ATTEMPTS}, trying again in ")
    assert ends[-1].stop[0] == ExitCode.CONFIG and "giving up (exit 78)" in ends[-1].stop[1]
    stable = after_end(Plan("run"), seats, a_child(spawned_at=10.0), ExitCode.CONFIG, now=10.0 + STABLE_AFTER,
                       served=False)
    assert stable.stop is None and "configuration error 1 of" in stable.tail    # a fresh count after a long run


def test_once_mode_ends_stop_the_supervisor_and_a_child_told_to_stop_is_no_restart():
    over = after_end(Plan("run", once=True), Seats(wanted=1), a_child("master"), 0, now=1.0, served=True)
    assert over.stop == (ExitCode.OK, "the batch is over (--once)") and not over.restart
    seats = Seats(wanted=2)
    first = after_end(Plan("worker", once=True), seats, a_child(), 0, now=1.0, served=True)
    last = after_end(Plan("worker", once=True), seats, a_child(), 0, now=1.0, served=True)
    assert first.stop is None and last.stop == (ExitCode.OK, "every worker is done (--once)") and seats.wanted == 0
    retiring = a_child()
    retiring.retiring_since = 0.5
    assert after_end(Plan("run"), Seats(wanted=1), retiring, -9, now=1.0, served=True).restart is False
