"""SqlTaskLoad: the SQL stores' TaskLoad (backends/task_load.py says how a load finds duplicates)."""
from typing import Optional, Sequence

from ..model import TaskLayout
from .sql_dialect import chunks
from .task_load import SEEN_TABLE, TaskLoad


class SqlTaskLoad(TaskLoad):
    """A TaskLoad on an SqlBatchStore, inside its transaction (SqlBatchStore.loading_tasks)."""

    def __init__(self, store, layout: TaskLayout, column: str, columns: dict, check_duplicates: bool):
        self.store, self.table, self.column, self.columns = store, layout.table, column, columns
        self.id_column = layout.id_field
        self.limit = store.column_limit(columns[column])
        self.by_index = store.has_leading_index(self.table, column)
        self.seen = check_duplicates and not self.by_index
        if self.seen:
            for statement in store.seen_table_statements(self.table, column, self.id_column):
                store.execute(statement)

    def known(self, urls: Sequence[str]) -> set:
        store = self.store
        wanted = set(urls)
        found: set = set()
        if self.by_index:
            for part in chunks(sorted(wanted), store.in_chunk):
                found.update(value for (value,) in store.fetch(
                    f"SELECT {store.quote(self.column)} FROM {store.quote(self.table)} "
                    f"WHERE {store.quote(self.column)} IN ({store.marks(len(part))})", part))
            return found & wanted      # exactly: a case-insensitive collation matches more
        keys = {store.seen_key(url): url for url in wanted}
        for part in chunks(list(keys), store.in_chunk):
            found.update(keys[key] for (key,) in store.fetch(
                f"SELECT {store.quote('url_key')} FROM {store.quote(SEEN_TABLE)} "
                f"WHERE {store.quote('url_key')} IN ({store.marks(len(part))})", part))
        return found

    def ids_of(self, urls: Sequence[str]) -> dict:
        store = self.store
        found: dict = {}
        if self.seen:       # the temporary table has each URL's id: no scan of the task table
            keys = {store.seen_key(url): url for url in set(urls)}
            for part in chunks(list(keys), store.in_chunk):
                found.update((keys[key], task_id) for key, task_id in store.fetch(
                    f"SELECT {store.quote('url_key')}, {store.quote('task_id')} FROM {store.quote(SEEN_TABLE)} "
                    f"WHERE {store.quote('url_key')} IN ({store.marks(len(part))}) AND "
                    f"{store.quote('task_id')} IS NOT NULL", part))
            return found
        wanted = set(urls)
        for part in chunks(sorted(wanted), store.in_chunk):
            for task_id, url in store.fetch(
                    f"SELECT {store.quote(self.id_column)}, {store.quote(self.column)} FROM {store.quote(self.table)} "
                    f"WHERE {store.quote(self.column)} IN ({store.marks(len(part))})", part):
                if url in wanted:       # exactly: a case-insensitive collation matches more
                    found.setdefault(url, task_id)
        return found

    def add(self, rows: Sequence[dict], urls: Optional[Sequence[str]] = None) -> None:
        store = self.store
        store.insert_tasks(self.table, self.columns, rows)
        if self.seen and urls:
            store.execute_many(f"INSERT INTO {store.quote(SEEN_TABLE)} ({store.quote('url_key')}) "
                               f"VALUES ({store.placeholder})", [(store.seen_key(url),) for url in urls])

    def close(self) -> None:
        """Drop the temporary table (it would outlive the transaction on MySQL's connection)."""
        if self.seen:
            self.store.execute(self.store.drop_seen_statement())
