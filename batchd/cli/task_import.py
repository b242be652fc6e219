"""`batchd tasks add` and `batchd tasks import`: load tasks into the configured store, checked.

A convenience: the task table stays the user's. When it does not exist yet, the seed's shape is created
(primary key, `url`, state and time columns, the state indexed) and a log line says so; an existing table
is never altered. A CSV file's header names the columns; it is read and added in chunks, so a file of
millions of rows is fine: Python holds one chunk at a time, and the store remembers the rest (TaskLoad,
backends/task_load.py).

What is added is checked first:
- a URL must be an absolute http or https URL with a host, with no space or control character in it,
  and fit the URL column (its declared length; batchd's bound, UNDECLARED_MOST, where it declares none).
  A row that fails, or that has more fields than the header, is bad: it is named by its place (the CSV's
  line, or the URL's position among the command's URLs), and nothing of the input is added, unless
  `skip_bad`: then the bad rows are left out and counted;
- a URL the task table already holds, or an earlier row of the same input, is a duplicate: named, and
  left out, unless `allow_duplicates`.
The whole load is one transaction of the store: with bad rows and no `skip_bad`, or when the database
refuses a chunk, nothing lands. At most MOST_SHOWN lines of each kind are logged, then how many more.
"""
import csv
import logging
from dataclasses import dataclass
from typing import Iterable, Iterator, Optional

from ..errors import BatchdError, ConfigError, ExitCode
from ..backends.task_load import shown, url_problem
from ..service.systemd import counted

log = logging.getLogger("batchd")

CHUNK = 1000
MOST_SHOWN = 20          # lines of each kind (bad rows, duplicates) logged; the rest are counted


class RefusedInput(BatchdError):
    """The database refused a chunk of the input (a value of another column, say): nothing was added."""

    exit_code = ExitCode.DATAERR


class _NothingAdded(Exception):
    """Leaves the load's transaction so that none of it lands (bad rows, no --skip-bad)."""


@dataclass(frozen=True)
class Entry:
    """One row of the input: where it is (`tasks.csv line 12`, `URL 3 of the command line`), its columns, and what is wrong with it
    beyond its URL (more fields than the header), if anything."""

    where: str
    row: dict
    problem: Optional[str] = None


@dataclass
class LoadReport:
    """What a load did: added, duplicates left out, bad rows (rejected, or skipped with skip_bad)."""

    table: str
    source: str
    noun: str                 # what the input is made of: "row" (a CSV file) or "URL" (the command line)
    skip_bad: bool
    added: int = 0
    duplicates: int = 0
    bad: int = 0

    @property
    def refused(self) -> bool:
        """Nothing was added because of bad rows."""
        return bool(self.bad) and not self.skip_bad

    @property
    def exit_code(self) -> int:
        return ExitCode.DATAERR if self.refused else ExitCode.OK

    def note_bad(self, entry: Entry, problem: str) -> None:
        self.bad += 1
        if self.bad <= MOST_SHOWN:
            log.error("%s: %s", entry.where, problem)

    def note_duplicate(self, entry: Entry, url: str) -> None:
        self.duplicates += 1
        if self.duplicates <= MOST_SHOWN:
            log.warning("%s: %s is a duplicate (in task table %s already, or earlier in the input): not added",
                        entry.where, shown(url), self.table)

    def summary(self) -> str:
        more = [f"and {n - MOST_SHOWN} more {what} not shown"
                for n, what in ((self.bad, f"bad {self.noun}s"), (self.duplicates, "duplicates"))
                if n > MOST_SHOWN]
        if self.refused:
            return (f"nothing added to {self.table} from {self.source}: {counted(self.bad, f'bad {self.noun}')} "
                    f"({'; '.join(more + ['--skip-bad adds the others']) })")
        parts = [f"{counted(self.added, 'task')} added to {self.table} from {self.source}",
                 f"{counted(self.duplicates, 'duplicate')} skipped",
                 f"{counted(self.bad, f'bad {self.noun}')} rejected"]
        return ", ".join(parts) + (f" ({'; '.join(more)})" if more else "")


def add_urls(runtime, urls: Iterable[str], column: str = "url", skip_bad: bool = False,
             allow_duplicates: bool = False) -> LoadReport:
    entries = (Entry(f"URL {n} of the command line", {column: url}) for n, url in enumerate(urls, start=1))
    return _load(runtime, entries, "the command line", "URL", column, [], skip_bad, allow_duplicates)


def import_csv(runtime, path: str, column: str = "url", skip_bad: bool = False,
               allow_duplicates: bool = False) -> LoadReport:
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if not header or not any(header):
                raise ConfigError(f"{path}: empty, or no header row naming the task table's columns")
            if column not in header:
                raise ConfigError(f"{path}: the header names no column {column} for the URLs (--column names another)")
            return _load(runtime, _csv_entries(reader, header, path), path, "row", column, header, skip_bad,
                         allow_duplicates)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except UnicodeDecodeError as e:       # in the header: the rows' are _csv_entries'
        raise RefusedInput(f"{path}: not UTF-8 text ({e.reason} at byte {e.start}); nothing was added") from None
    except csv.Error as e:
        raise RefusedInput(f"{path}: not a CSV file ({e}); nothing was added") from None


def _csv_entries(reader, header: list, path: str) -> Iterator[Entry]:
    """The records after the header, each named by the line it starts on (a quoted field may span lines).
    A file the csv module cannot read on ends the load, naming the line."""
    while True:
        start = reader.line_num + 1
        try:
            fields = next(reader, None)
        except UnicodeDecodeError as e:
            raise RefusedInput(f"{path} line {reader.line_num + 1}: not UTF-8 text ({e.reason}); nothing was "
                               "added") from None
        except csv.Error as e:
            raise RefusedInput(f"{path} line {start}: not CSV ({e}); nothing was added") from None
        if fields is None:
            return
        if not fields:          # a blank line
            continue
        row = {name: value for name, value in zip(header, fields) if value != ""}
        extra = f"{len(fields)} fields where the header names {len(header)}" if len(fields) > len(header) else None
        yield Entry(f"{path} line {start}", row, extra)


def _load(runtime, entries: Iterable[Entry], source: str, noun: str, column: str, names: list,
          skip_bad: bool, allow_duplicates: bool) -> LoadReport:
    store, layout = runtime.store, runtime.layout
    store.create_task_table(layout)
    report = LoadReport(layout.table, source, noun, skip_bad)
    try:
        with store.loading_tasks(layout, column, names, check_duplicates=not allow_duplicates) as load:
            for chunk in _chunks(entries):
                good = [(entry, entry.row.get(column)) for entry in chunk if _checked(report, entry, column, load)]
                if report.refused:
                    continue        # the rest is still read, so that every bad row is counted
                if not allow_duplicates:
                    good = _fresh(report, good, load.known([url for _, url in good]))
                _add(load, good, allow_duplicates)
                report.added += len(good)
            if report.refused:
                raise _NothingAdded()
    except _NothingAdded:
        report.added = report.duplicates = 0
    (log.error if report.refused else log.info)("%s (%s)", report.summary(), store.describe())
    return report


def _checked(report: LoadReport, entry: Entry, column: str, load) -> bool:
    problem = entry.problem or url_problem(entry.row.get(column), column, load.limit)
    if problem:
        report.note_bad(entry, problem)
    return problem is None


def _fresh(report: LoadReport, good: list, known: set) -> list:
    """The entries of a chunk whose URL is neither in the table nor earlier in the chunk."""
    fresh, seen = [], set()
    for entry, url in good:
        if url in known or url in seen:
            report.note_duplicate(entry, url)
        else:
            seen.add(url)
            fresh.append((entry, url))
    return fresh


def _add(load, good: list, allow_duplicates: bool) -> None:
    if not good:
        return
    try:
        load.add([entry.row for entry, _ in good], None if allow_duplicates else [url for _, url in good])
    except BatchdError:
        raise
    except Exception as e:     # the database refused a value of this chunk: none of the input lands
        raise RefusedInput(f"{good[0][0].where} to {good[-1][0].where}: the database refused a row of "
                           f"these ({type(e).__name__}: {e}); nothing was added") from None


def _chunks(entries: Iterable[Entry]) -> Iterator[list]:
    chunk: list = []
    for entry in entries:
        chunk.append(entry)
        if len(chunk) == CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
