"""`batchd tasks add` and `batchd tasks import`: load tasks into the configured store.

A convenience: the task table stays the user's. When it does not exist yet, the seed's
shape is created (primary key, `url`, state and time columns, the state indexed) and a
log line says so; an existing table is never altered. A CSV file's header names the
columns; it is read and inserted in chunks, so a file of millions of rows is fine.
"""
import csv
import logging
from typing import Iterable, Iterator

from ..errors import ConfigError

log = logging.getLogger("batchd")

CHUNK = 1000


def add_urls(runtime, urls: Iterable[str], column: str = "url") -> int:
    return _load(runtime, ({column: url} for url in urls), "the command line")


def import_csv(runtime, path: str) -> int:
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            if not reader.fieldnames:
                raise ConfigError(f"{path}: empty, or no header row naming the task table's columns")
            return _load(runtime, _csv_rows(reader, path), path)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except csv.Error as e:
        raise ConfigError(f"{path}: not a CSV file ({e})") from None


def _csv_rows(reader: csv.DictReader, path: str) -> Iterator[dict]:
    for row in reader:
        if None in row:
            raise ConfigError(f"{path} line {reader.line_num}: more fields than the header names")
        yield {name: value for name, value in row.items() if value not in (None, "")}


def _load(runtime, rows: Iterable[dict], source: str) -> int:
    store, layout = runtime.store, runtime.layout
    store.create_task_table(layout)
    added, chunk = 0, []
    for row in rows:
        chunk.append(row)
        if len(chunk) == CHUNK:
            added += store.add_tasks(layout, chunk)
            chunk = []
    if chunk:
        added += store.add_tasks(layout, chunk)
    log.info("%d tasks added to %s from %s (%s)", added, layout.table, source, store.describe())
    return added
