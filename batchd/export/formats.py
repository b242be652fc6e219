"""The formats `batchd export` writes, one writer each, fed chunk by chunk (lists of row tuples) so that nothing
holds more than a chunk:

    jsonl    one JSON object per line, UTF-8 (not escaped to ASCII); a default item table's stored document
             goes out as it is stored when it is one line already (no parse, no dump)
    csv      a header row of the column names, then one line per row (RFC 4180 quoting)
    parquet  with pyarrow (the optional extra `batchd[export]`): the types of the first rows, kept for the file

Values that JSON and CSV have no type for are written so that a reader gets them back: times (datetime,
date, time) in ISO 8601; decimals as their exact digits (a JSON string: a float would round them); bytes
as base64; a list or a mapping in a CSV cell as JSON text. Parquet keeps times, decimals and bytes as its
own types, and lists and mappings as JSON text (one flat schema for every row).
"""
import base64
import csv
import json
from datetime import date, datetime, time
from decimal import Decimal
from typing import IO, Any, Callable, Optional

from ..errors import ConfigError

FORMATS = ("jsonl", "csv", "parquet")
BINARY_FORMATS = ("parquet",)
PARQUET_SAMPLE = 50_000      # rows a Parquet file's types are read from, at most, before its first row is written
INSTALL_PARQUET = 'Parquet needs pyarrow: pip install "batchd[export]" (Debian 12 packages none)'


def plain_value(value: Any) -> Any:
    """A value JSON has no type for, as text a reader can turn back into it (json's `default`)."""
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    raise TypeError(f"a {type(value).__name__} has no JSON form")


ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=plain_value)


def row_encoder() -> Callable[[Any], str]:
    """ENCODER.encode, but for json's C encoder made once: encode() makes it anew at every call, which was a third
    of what a row of a column table cost to write. CPython has one (it is what json.dumps uses); without it,
    ENCODER.encode. No cycle check: a row read from a table holds none."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return ENCODER.encode
    encoder = make(None, plain_value, json.encoder.encode_basestring, None, ":", ",", False, False, True)
    return lambda value: "".join(encoder(value, 0))


ROW_ENCODER = row_encoder()


def cell_text(value: Any) -> Any:
    """A CSV cell: str, int and float as they are (the csv module writes them), None empty, the rest as text."""
    if value is None or isinstance(value, (str, int, float)):
        return value
    if isinstance(value, (dict, list, tuple)):
        return ENCODER.encode(value)
    return plain_value(value)


class JsonLinesWriter:
    def __init__(self, out: IO[str], columns: tuple):
        self.out, self.columns = out, columns

    def write_rows(self, rows: list) -> None:
        columns, encode = self.columns, ROW_ENCODER
        self.out.write("".join(encode(dict(zip(columns, row))) + "\n" for row in rows))

    def write_documents(self, documents: list) -> None:
        """A default item table's items: their stored JSON text as it is when it holds one line, else dumped (a
        driver may give the text as bytes, a memory store the item itself)."""
        self.out.write("".join(_one_line(document) + "\n" for document in documents))

    def close(self) -> None:
        pass


def _one_line(document: Any) -> str:
    if isinstance(document, (bytes, bytearray)):
        document = document.decode("utf-8")
    if isinstance(document, str):
        return document if "\n" not in document else ENCODER.encode(json.loads(document))
    return ENCODER.encode(document)


class CsvWriter:
    def __init__(self, out: IO[str], columns: tuple):
        self.writer = csv.writer(out)
        self.writer.writerow(columns)

    def write_rows(self, rows: list) -> None:
        self.writer.writerows([cell_text(value) for value in row] for row in rows)

    def close(self) -> None:
        pass


class ParquetWriter:
    """Rows are held until PARQUET_SAMPLE of them (or the end) say each column's type, a column with no value
    in them being text; then every chunk is a row group of that schema. A later value of another type is a
    one-line ConfigError naming the column (export that table as jsonl or csv)."""

    def __init__(self, out: IO[bytes], columns: tuple):
        self.pa, self.pq = parquet_modules()
        self.out, self.columns = out, columns
        self.held: list = []
        self.writer: Optional[Any] = None

    def write_rows(self, rows: list) -> None:
        if self.writer is None:
            self.held += rows
            if len(self.held) >= PARQUET_SAMPLE:
                self._start()
        else:
            self._write(rows)

    def close(self) -> None:
        if self.writer is None:
            self._start()
        assert self.writer is not None
        self.writer.close()

    def _start(self) -> None:
        pa = self.pa
        arrays = [pa.array(values) for values in self._columns_of(self.held) or [[] for _ in self.columns]]
        schema = pa.schema([(name, pa.string() if pa.types.is_null(array.type) else array.type)
                            for name, array in zip(self.columns, arrays)])
        self.writer = self.pq.ParquetWriter(self.out, schema)
        held, self.held = self.held, []
        if held:
            self._write(held)

    def _write(self, rows: list) -> None:
        assert self.writer is not None
        schema = self.writer.schema
        arrays = []
        for field, values in zip(schema, self._columns_of(rows)):
            try:
                arrays.append(self.pa.array(values, type=field.type))
            except (self.pa.ArrowInvalid, self.pa.ArrowTypeError, OverflowError, TypeError) as e:
                raise ConfigError(f"column {field.name!r} holds values of another type than {field.type} in its first "
                                  f"rows ({e}): export this table as jsonl or csv") from None
        self.writer.write_table(self.pa.Table.from_arrays(arrays, schema=schema))

    @staticmethod
    def _columns_of(rows: list) -> list:
        """The rows' values column by column, lists and mappings as JSON text."""
        return [[ENCODER.encode(v) if isinstance(v, (dict, list, tuple)) else v for v in column]
                for column in zip(*rows)] if rows else []


def parquet_modules() -> tuple:
    """(pyarrow, pyarrow.parquet), or a one-line ConfigError saying what to install."""
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise ConfigError(INSTALL_PARQUET) from None
    return pyarrow, pyarrow.parquet


def open_writer(name: str, out: IO, columns: tuple):
    """The writer of format `name` on `out` (text for jsonl and csv, bytes for parquet)."""
    writer = {"jsonl": JsonLinesWriter, "csv": CsvWriter, "parquet": ParquetWriter}[name]
    return writer(out, columns)
