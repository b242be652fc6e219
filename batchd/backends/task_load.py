"""TaskLoad: one run of `batchd tasks add|import` holding the task table (BatchStore.loading_tasks); the SQL
stores' is in backends/sql_task_load.py.

A load asks which of a chunk's URLs the table already holds (or this load added), adds a chunk, and
commits everything at its end or nothing. Python holds one chunk at a time: what the load has added is
remembered by the database, in the one transaction the load runs in:

- when an index of the task table leads with the URL column, each chunk is looked up in the table itself,
  which inside the transaction also holds the rows added by the load's earlier chunks;
- otherwise a lookup would scan the whole table for every chunk, so the load first copies the table's URLs
  (as the dialect's key of each: the text, or its SHA-1) into a temporary table keyed on them, one scan,
  and adds each chunk's keys to it as it adds the chunk. The user's table is never altered.
"""
import abc
import re
from dataclasses import dataclass
from typing import Optional, Sequence

# A column whose declared type gives no length (SQLite's TEXT, as the seed's table has it on SQLite; MySQL's
# LONGTEXT) still gets a bound: browsers and servers commonly refuse URLs far shorter than this (8 KB is a
# usual request-line limit of web servers), so a longer value in a task table is a mistake, not a page.
UNDECLARED_MOST = 8192
DECLARED_LENGTH = re.compile(r"\(\s*(\d+)\s*\)")
SEEN_TABLE = "batchd_task_load"      # the temporary table of a load whose URL column has no index


@dataclass(frozen=True)
class ColumnLimit:
    """How long a value the task table's URL column takes: `most` characters, or bytes of UTF-8."""

    most: int
    unit: str = "characters"
    declared: bool = True

    def fits(self, value: str) -> bool:
        size = len(value.encode("utf-8")) if self.unit == "bytes" else len(value)
        return size <= self.most

    def size_of(self, value: str) -> int:
        return len(value.encode("utf-8")) if self.unit == "bytes" else len(value)

    def describe(self) -> str:
        origin = "the column's" if self.declared else "batchd's bound for a column of no declared length:"
        return f"{origin} {self.most:,} {self.unit}"


def declared_limit(declared_type: str) -> ColumnLimit:
    """The limit a declared type like VARCHAR(500) gives in characters; UNDECLARED_MOST when it gives none."""
    found = DECLARED_LENGTH.search(declared_type or "")
    return ColumnLimit(int(found.group(1))) if found else ColumnLimit(UNDECLARED_MOST, declared=False)


class TaskLoad(abc.ABC):
    """What `batchd tasks` needs of a store while it loads tasks: the URL column's limit, which URLs are
    already there, and adding a chunk. Inside BatchStore.loading_tasks: committed when it ends, discarded
    when an exception leaves it."""

    limit: ColumnLimit

    @abc.abstractmethod
    def known(self, urls: Sequence[str]) -> set:
        """Those of `urls` the task table holds (compared exactly), the rows this load added included."""

    @abc.abstractmethod
    def add(self, rows: Sequence[dict], urls: Optional[Sequence[str]] = None) -> None:
        """Add task rows (their columns checked by loading_tasks); `urls`, their URLs, are remembered for
        known() (None: the load does not check for duplicates)."""
