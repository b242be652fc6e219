"""`batchd export`: which item table, which rows, and the file they go to.

The table: `--table`, else the spider's. A spider's items go to its item table (`__item_table__`, else the
default `<task table>_item`), and to the `__table__` of each Item class its module names; when that makes
several and more than one holds rows, the command names them and asks for one (a one-line ConfigError).

The rows: every row of the table, or with `--batch N` those of batch N: the default item table keeps each
item's batch in its `batch_id`; a column table says it in the column ITEM_BATCH_COLUMN names, which the worker
fills as it writes a row (docs/export.md says why a column of the user's choosing, and what an upsert means
for it). The store reads them in chunks (BatchStore.item_rows), so memory stays flat however large the table.

The file: `-` is standard output; a file is written beside its final name and renamed onto it once whole and
fsynced, so a reader never sees half an export and a failed one leaves the old file as it was.
"""
import io
import json
import os
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Iterator, Optional

from ..backends.store import BatchStore
from ..config import check_identifier
from ..errors import BatchdError, ConfigError, ExitCode
from ..item import Item
from ..model import COLUMNS_ITEM_KIND, DEFAULT_ITEM_KIND, TaskLayout
from .formats import BINARY_FORMATS, FORMATS, open_writer


class ExportWriteError(BatchdError):
    """The output file could not be written (a disk full, a folder missing or read-only)."""

    exit_code = ExitCode.IOERR


@dataclass(frozen=True)
class ItemTable:
    name: str
    kind: str       # DEFAULT_ITEM_KIND (a JSON document per item) or COLUMNS_ITEM_KIND


@dataclass(frozen=True)
class Exported:
    table: str
    rows: int
    seconds: float


def spider_item_tables(spider, layout: TaskLayout) -> list:
    """The ItemTables the spider's items go to: its item table first, then the `__table__` of each Item class its
    module names (imported or defined there), in the order the module holds them."""
    name, kind = layout.item_destination
    tables = {name: ItemTable(name, kind)}
    module = sys.modules.get(type(spider).__module__)
    for value in list(vars(module).values()) if module is not None else []:
        if isinstance(value, type) and issubclass(value, Item) and value.__table__:
            tables.setdefault(value.__table__, ItemTable(value.__table__, COLUMNS_ITEM_KIND))
    return list(tables.values())


def chosen_table(store: BatchStore, tables: list, asked: Optional[str], layout: TaskLayout) -> ItemTable:
    """--table's (any table of the store: the spider's kind for its default item table, else a column table), else
    the spider's one table, else the one of them that holds rows; ConfigError naming them when that is not one."""
    if asked is not None:
        check_identifier(asked, "--table")
        return next((t for t in tables if t.name == asked),
                    ItemTable(asked, DEFAULT_ITEM_KIND if asked == layout.default_item_table else COLUMNS_ITEM_KIND))
    if len(tables) == 1:
        return tables[0]
    holding = [table for table in tables if _holds_rows(store, table)]
    if len(holding) > 1:
        raise ConfigError(f"the spider's items are in {len(holding)} tables: {', '.join(t.name for t in holding)}; "
                          "name one with --table")
    return holding[0] if holding else tables[0]


def _holds_rows(store: BatchStore, table: ItemTable) -> bool:
    try:
        chunks = store.item_rows(table.name, table.kind, size=1).chunks
    except ConfigError:      # an Item class's table not made yet: no rows
        return False
    first = next(chunks, None)
    close = getattr(chunks, "close", None)
    if close is not None:
        close()
    return bool(first)


def format_of(asked: Optional[str], output: str) -> str:
    """--format, else the output file's suffix when it names one (items.csv), else jsonl."""
    if asked is not None:
        return asked
    suffix = os.path.splitext(output)[1].lstrip(".").lower()
    return suffix if suffix in FORMATS else "jsonl"


def export_items(store: BatchStore, table: ItemTable, fmt: str, output: str, batch_id: Optional[int] = None,
                 batch_column: Optional[str] = None) -> Exported:
    """Write the table's rows (batch `batch_id`'s only, when given) as `fmt` to `output` ("-": stdout)."""
    started = time.monotonic()
    if fmt in BINARY_FORMATS and output == "-" and sys.stdout.isatty():
        raise ConfigError(f"--format {fmt} is binary: give -o FILE, or send standard output to a file or a pipe")
    stream = store.item_rows(table.name, table.kind, batch_id, batch_column, as_text=fmt not in BINARY_FORMATS)
    documents = table.kind != COLUMNS_ITEM_KIND
    columns = stream.columns
    if documents and fmt != "jsonl":        # CSV and Parquet need every field's name before the first row
        columns = document_fields(store.item_rows(table.name, table.kind, batch_id, batch_column).chunks)
    rows = 0
    with output_file(output, binary=fmt in BINARY_FORMATS) as out:
        writer = open_writer(fmt, out, columns)
        for chunk in stream.chunks:
            if documents and fmt == "jsonl":
                writer.write_documents([row[0] for row in chunk])
            elif documents:
                writer.write_rows([tuple(doc.get(c) for c in columns) for doc in map(_document, chunk)])
            else:
                writer.write_rows(chunk)
            rows += len(chunk)
        writer.close()
    return Exported(table.name, rows, time.monotonic() - started)


def document_fields(chunks: Iterator[list]) -> tuple:
    """Every field the documents hold, in the order first met (a first pass over them)."""
    fields: dict = {}
    for chunk in chunks:
        for row in chunk:
            fields.update(dict.fromkeys(_document(row)))
    return tuple(fields)


def _document(row: tuple) -> dict:
    document = row[0]
    return json.loads(document) if isinstance(document, (str, bytes)) else document


@contextmanager
def output_file(path: str, binary: bool) -> Iterator[IO]:
    """Standard output for "-"; else a temporary file beside `path`, fsynced and renamed onto it when the block
    ends without an error (and removed when it does not). A write the disk refuses: ExportWriteError."""
    if path == "-":
        if binary:
            yield sys.stdout.buffer
            sys.stdout.buffer.flush()
            return
        text = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", newline="")
        try:
            yield text
            text.flush()
        finally:
            text.detach()        # sys.stdout keeps its buffer
        return
    folder, name = os.path.split(os.path.abspath(path))
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=folder)
    except OSError as e:
        raise ExportWriteError(f"-o {path}: cannot write there ({e.strerror or e})") from None
    try:
        with (os.fdopen(handle, "wb") if binary else os.fdopen(handle, "w", encoding="utf-8", newline="")) as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, path)
    except OSError as e:
        _remove(temporary)
        raise ExportWriteError(f"-o {path}: cannot write it ({e.strerror or e}); the file is left as it was") from None
    except BaseException:
        _remove(temporary)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
