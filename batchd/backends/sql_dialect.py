"""SqlDialect: what a dialect of the SQL store must say, and the statement helpers every part of it shares.

`MysqlBatchStore` and `SqliteBatchStore` bring only their SQL spelling, their connections, their DDL and
their clock; the store's logic (backends/sql.py, backends/sql_results.py) is written once on these hooks:

    spelling   quote_mark, placeholder         ` and %s, or " and ?
               in_chunk                        at most this many ids in one IN (...)
               claim_lock                      after the claim's SELECT (MySQL: FOR UPDATE SKIP LOCKED)
               move_in_one_transaction         move() runs its chunks in one transaction, or each alone
               stamped_on_insert/_on_update    batch record columns the store sets to now() itself
               cursor_type                     the record's reset_cursor column (JSON of an id, or NULL)
               stats_type                      the record's stats column (JSON counters, or NULL), and its quality's
               print_type                      a page's parsed_by column (a sha1 in hex, or NULL)
               outcome_type                    the record's outcome column (clean, flagged, failed, or NULL)
               now_term()                      the store's clock in a statement: (sql, values)
               older_than_term(column, s)      "column is more than s seconds old": (sql, values)
               time_from_db(value)             a time column as read -> datetime
               upsert_clause(columns, key)     what turns an INSERT into an upsert
               column_value(value)             an item value as it is bound to a column
    plumbing   fetch(sql, params, dicts)       the rows of one statement
               stream_select(t, selected, ...) a table's rows in chunks, never all at once (batchd export)
               exported_column(c, info, text)  what an export selects of a column (times as text, say)
               execute(sql, params)            one writing statement -> rows changed
               execute_many(sql, rows)         one statement over many rows of values
               transaction()                   statements inside it, on this thread, commit together
    schema     location()                      where tables are looked for, for messages
               table_columns(table)            column name -> what the dialect needs to know of it
               unique_keys(table)              the column sets of its primary key and UNIQUE indexes
               check_task_columns(layout, c)   the time column's type; the id's type for the item table
               has_leading_index(t, c)         whether an index of t starts with column c
               state_range_hint(layout)        what makes a read of pending rows in an id range use the state index
               index_statement(t, c)           the statement that would create one
               create_record_table(t), create_default_item_table(t), create_failure_table(t),
               create_page_table(t), create_revisit_table(t)
    loading    column_limit(info)              how long a value a column (table_columns' entry) takes
               seen_table_statements(t, c, i) a load's temporary table of the keys of t's values in column c
               seen_key(url)                   the key of a value in it; drop_seen_statement() drops it

Every statement binds its values; table and column names come from a validated TaskLayout
(or item keys, checked as identifiers) and always pass through quote().
"""
import abc
from typing import Iterator, Optional, Sequence

from ..codec import plain_json
from ..config import check_identifier
from ..model import TaskLayout
from .store import BatchStore
from .task_load import ColumnLimit


def marks(n: int, placeholder: str) -> str:
    """n bind markers, for VALUES (...) or IN (...)."""
    return ", ".join([placeholder] * n)


def where_all(conditions: list) -> str:
    """ WHERE the conditions all hold; nothing when there are none."""
    return " WHERE " + " AND ".join(conditions) if conditions else ""


def column_sets(rows) -> list:
    """(index name, column name) rows -> the column set of each index."""
    indexes: dict = {}
    for index, column in rows:
        indexes.setdefault(index, set()).add(column)
    return [frozenset(columns) for columns in indexes.values()]


def chunks(seq: Sequence, size: int):
    for start in range(0, len(seq), size):
        yield list(seq[start:start + size])


class SqlDialect(BatchStore):
    """A BatchStore on an SQL database, as far as its dialect goes: a dialect subclass sets the attributes and
    fills in the hooks."""

    quote_mark: str
    placeholder: str
    in_chunk: int
    claim_lock: str
    move_in_one_transaction: bool
    stamped_on_insert: tuple
    stamped_on_update: tuple
    cursor_type: str
    stats_type: str
    print_type: str
    outcome_type: str

    # -- the dialect's spelling
    def quote(self, name: str) -> str:
        """Quote an identifier, validated here once more."""
        return f"{self.quote_mark}{check_identifier(name, 'identifier')}{self.quote_mark}"

    def marks(self, n: int) -> str:
        return marks(n, self.placeholder)

    @abc.abstractmethod
    def now_term(self) -> tuple:
        """(SQL, values) that stand for now() in a statement; one call per statement."""

    @abc.abstractmethod
    def older_than_term(self, column: str, seconds: float) -> tuple:
        """(SQL, values) of the test "`column` is more than `seconds` seconds older than now()"."""

    def time_from_db(self, value):
        """A time column's value as the driver returns it -> datetime."""
        return value

    @abc.abstractmethod
    def upsert_clause(self, columns: Sequence[str], key: Optional[Sequence[str]]) -> str:
        """The clause after INSERT ... VALUES (...) that overwrites `columns` of the row already holding
        the same unique key: `key` for a table batchd made, None for any unique key of the user's table."""

    def column_value(self, value):
        """Lists and dicts go to a column as JSON text; the driver converts the rest."""
        return plain_json(value) if isinstance(value, (dict, list, tuple)) else value

    # -- the dialect's plumbing
    @abc.abstractmethod
    def fetch(self, sql: str, params: Sequence = (), dicts: bool = False) -> list:
        """Every row of one statement: tuples (indexable by position), or dicts by column name."""

    @abc.abstractmethod
    def execute(self, sql: str, params: Sequence = ()) -> int:
        """Run one writing statement; return how many rows it changed."""

    @abc.abstractmethod
    def execute_many(self, sql: str, rows: Sequence[Sequence]) -> None:
        """Run one statement once per row of values."""

    @abc.abstractmethod
    def stream_select(self, table: str, selected: Sequence[str], conditions: list, values: list,
                      size: int) -> Iterator[list]:
        """The `selected` expressions (exported_column's) of the rows of `table` where every condition holds, as
        lists of at most `size` tuples, read as they are asked for: the whole table is never held (MySQL: a
        server-side cursor on a connection of its own; SQLite: chunks in rowid order). The table is the user's:
        nothing is added to it to read it."""

    def exported_column(self, column: str, info, as_text: bool) -> str:
        """What an export selects of `column` (its table_columns() entry `info`): the column itself, or with
        `as_text` an expression that gives its times and decimals as text (BatchStore.item_rows)."""
        return self.quote(column)

    @abc.abstractmethod
    def transaction(self):
        """A context manager: the statements this thread runs inside it commit together, or not at all."""

    # -- the dialect's schema
    @abc.abstractmethod
    def unique_keys(self, table: str) -> list:
        """The column sets (frozensets) of the table's primary key and UNIQUE indexes."""

    @abc.abstractmethod
    def location(self) -> str:
        """Where tables are looked for, as a message says it: "database `x`", "SQLite file /path"."""

    @abc.abstractmethod
    def table_columns(self, table: str) -> dict:
        """Column name -> what the dialect knows of it; empty when there is no such table."""

    def tables_columns(self, tables: Sequence[str]) -> dict:
        """Each table's `table_columns`, for several tables (a dialect may read them all at once)."""
        return {table: self.table_columns(table) for table in tables}

    @abc.abstractmethod
    def check_task_columns(self, layout: TaskLayout, columns: dict) -> None:
        """Raise ConfigError unless the time column holds times batchd can compare; note the id
        column's type for the default item table's task_id."""

    @abc.abstractmethod
    def has_leading_index(self, table: str, column: str) -> bool:
        """Whether some index of `table` starts with `column`."""

    def state_range_hint(self, layout: TaskLayout) -> str:
        """What follows the task table's name in a read of pending rows in an id range (HostClaim's) so that it
        ranges over the state index in id order; empty when the planner finds that alone (SQLite)."""
        return ""

    @abc.abstractmethod
    def index_statement(self, table: str, column: str) -> str:
        """The statement that would create an index on `table` (`column`)."""

    @abc.abstractmethod
    def create_record_table(self, table: str) -> None:
        """CREATE TABLE IF NOT EXISTS for the batch record, with the columns of RECORD_COLUMNS."""

    @abc.abstractmethod
    def create_default_item_table(self, table: str) -> None:
        """CREATE TABLE IF NOT EXISTS for the default item table, unique on ITEM_KEY."""

    @abc.abstractmethod
    def create_failure_table(self, table: str) -> None:
        """CREATE TABLE IF NOT EXISTS for the failure records, with FAILURE_COLUMNS, keyed on FAILURE_KEY."""

    @abc.abstractmethod
    def create_page_table(self, table: str) -> None:
        """CREATE TABLE IF NOT EXISTS for the PageRecords, with PAGE_COLUMNS (the texts as long as
        model.PAGE_TEXT_MOST and PAGE_URL_MOST allow), keyed on url_key, changed_in indexed."""

    @abc.abstractmethod
    def create_revisit_table(self, table: str) -> None:
        """CREATE TABLE IF NOT EXISTS for the Revisits, with REVISIT_COLUMNS, keyed on task_id, next_due indexed."""

    @abc.abstractmethod
    def task_table_statements(self, layout: TaskLayout) -> list:
        """The statements that make the seed's task table (id, url, state, time; the state indexed)."""

    @abc.abstractmethod
    def column_limit(self, info) -> ColumnLimit:
        """How long a value the column whose table_columns() entry is `info` takes."""

    @abc.abstractmethod
    def seen_table_statements(self, table: str, column: str, id_column: str) -> list:
        """The statements that (re)make the temporary table SEEN_TABLE of a TaskLoad (backends/task_load.py):
        its primary key `url_key` holds seen_key() of each distinct value of `column`, and `task_id` the least
        `id_column` of its rows (NULL for the rows the load adds: TaskLoad.ids_of)."""

    @abc.abstractmethod
    def seen_key(self, url: str):
        """The key of a URL in SEEN_TABLE, equal only for equal URLs."""

    @abc.abstractmethod
    def drop_seen_statement(self) -> str:
        """The statement that drops SEEN_TABLE."""

    def _quoted_task_table(self) -> tuple:
        """The task table, its id column and its state column, quoted."""
        layout = self.opened_layout
        return self.quote(layout.table), self.quote(layout.id_field), self.quote(layout.state_field)
