"""Items are checked where they are yielded: a value the destination cannot store fails its task
at once, with one line naming the task, the key and the type, instead of failing a flush later
(where one bad item would hold a whole group of other tasks' items hostage).

The default item table keeps each item as a JSON document: keys are strings (JSON makes
numbers, booleans and null keys strings, as it does), values are JSON values, with dates,
times and Decimals as strings and bytes as base64 (what `codec.plain_json` writes). A column
item table (`__item_table__`) takes one column per top-level key: the key must be a column,
the value a number, text, bytes, a date or time, or a list / dict stored as JSON text.
NaN and infinities are refused everywhere: MySQL's JSON and numeric columns reject them.

An Item class (batchd/item.py) is checked against its table the first time a worker meets
it: the table exists, each field is a column, the unique key is a UNIQUE index; else ConfigError.
An Item whose required field has no value is not stored: InvalidItems tells it, sparingly.
"""
import logging
import math
import threading
import time as clock
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Optional

from ..codec import plain_json, strict_json
from ..config import IDENTIFIER
from ..errors import ConfigError

log = logging.getLogger("batchd.items")

REMIND_EVERY = 60.0     # one line per item class and field at most this often; the rest are counted

INT_RANGE = (-2 ** 63, 2 ** 64 - 1)     # BIGINT and BIGINT UNSIGNED, the widest integer columns
SCALARS = (str, bool, type(None))
TIMES = (datetime, date, time)
BINARY = (bytes, bytearray, memoryview)
JSON_KEYS = (str, int, float, bool, type(None))
PLAIN = SCALARS + TIMES + BINARY


class BadItem(ValueError):
    """An item its destination cannot store; the message names the key and what it holds."""


def check_item_table(store, item_class, batch_column: Optional[str] = None) -> None:
    """ConfigError, one line, unless the store can take `item_class`'s items as declared: its table exists,
    every field is a column, its __unique_key__ is the primary key or a UNIQUE index of the table, and it has
    the `batch_column` (ITEM_BATCH_COLUMN) when one is set."""
    table, name = item_class.__table__, item_class.__name__
    columns = store.item_columns(table, setting=f"{name}.__table__")
    check_batch_column(columns, batch_column, table)
    strays = [field for field in item_class.__fields__ if columns is not None and field not in columns]
    if strays:
        raise ConfigError(f"{name}: field {strays[0]!r} is not a column of item table `{table}`")
    key = item_class.__unique_key__
    keys = store.unique_keys(table) if key else None
    if keys is not None and frozenset(key) not in keys:
        raise ConfigError(f"item table `{table}` has no UNIQUE index or primary key on exactly ({', '.join(key)}), "
                          f"which {name}.__unique_key__ upserts on: add one")


def check_batch_column(columns: Optional[frozenset], batch_column: Optional[str], table: str) -> None:
    """ConfigError naming the table and the setting when ITEM_BATCH_COLUMN is set and `columns` (a column item
    table's, None when the store cannot tell) lack it: batchd fills the column, it never adds one."""
    if batch_column is not None and columns is not None and batch_column not in columns:
        raise ConfigError(f"item table `{table}` has no column `{batch_column}` (ITEM_BATCH_COLUMN): add it "
                          "(an integer, the batch id) or unset the setting")


class InvalidItems:
    """Items not stored because a required field has no value. The first of each item class and field is
    told at once (task, class, field); later ones at most once every REMIND_EVERY seconds, with how many
    went untold meanwhile, so that a storm of them is a few lines."""

    def __init__(self):
        self._lock = threading.Lock()
        self._last_told: dict = {}      # (class name, field) -> clock.monotonic() of its last line
        self._untold: dict = {}         # (class name, field) -> items since that line

    def report(self, task_id, class_name: str, field: str, present: bool) -> None:
        what = (class_name, field)
        with self._lock:
            last = self._last_told.get(what)
            if last is not None and clock.monotonic() - last < REMIND_EVERY:
                self._untold[what] = self._untold.get(what, 0) + 1
                return
            self._last_told[what] = clock.monotonic()
            untold = self._untold.pop(what, 0)
        log.warning("task %s: a %s item was not stored: its required field %r %s%s", task_id, class_name, field,
                    "is None" if present else "is missing", _since(untold))

    def summary(self) -> None:
        """The items no line has told yet (the worker is stopping)."""
        with self._lock:
            untold, self._untold = self._untold, {}
        for (class_name, field), n in untold.items():
            log.warning("%d more %s items were not stored: their required field %r had no value", n, class_name,
                        field)


def _since(untold: int) -> str:
    return f" (and {untold} more such items since the last line)" if untold else ""


def check_item(item: dict, columns: Optional[frozenset] = None, table: str = "the item table") -> None:
    """Raise BadItem for the first value `table` cannot store. `columns`: the columns of a column item
    table; None for the default item table (a JSON document)."""
    if columns is None:
        _check_json(item, ())
        return
    for key, value in item.items():
        _check_column(key, value, columns, table)


def item_document(item: dict) -> str:
    """The JSON document the default item table stores for `item` (codec.plain_json's text), made once here,
    where the item is checked; BadItem as check_item would raise it. The encoder refuses what the check
    refuses, in C (6.6 us for the bench's item, where the check's walk took 8.8 and the writer's plain_json
    7.5 more); only an item it refuses is walked again, to name the culprit."""
    try:
        return strict_json(item)
    except (TypeError, ValueError):
        _check_json(item, ())
        return plain_json(item)     # refused, yet fit (a NaN key, say): written as it always was


def _check_column(key, value, columns: frozenset, table: str) -> None:
    if not isinstance(key, str) or not IDENTIFIER.match(key) or key not in columns:
        raise BadItem(f"item key {key!r} is not a column of item table `{table}`")
    if isinstance(value, (dict, list, tuple)):
        _check_json(value, (key,))
    else:
        _check_scalar(value, (key,), column=True)


def _check_json(value, path: tuple) -> None:
    if not _json_fits(value):
        _name_the_culprit(value, path)


def _json_fits(value) -> bool:
    """Whether a JSON document can hold `value`. This is the walk every item takes, so it builds no key paths
    (they were half its time); _name_the_culprit walks again, with them, only for a value that does not fit."""
    if isinstance(value, PLAIN):
        return True
    if isinstance(value, dict):
        return all(isinstance(key, JSON_KEYS) and _json_fits(inner) for key, inner in value.items())
    if isinstance(value, (list, tuple)):
        return all(_json_fits(inner) for inner in value)
    try:                    # one word on what a scalar may hold: _check_scalar's (its message is not shown here)
        _check_scalar(value, ("",), column=False)
    except BadItem:
        return False
    return True


def _name_the_culprit(value, path: tuple) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            if not isinstance(key, JSON_KEYS):
                raise BadItem(f"item key {_show(path + (key,))} is a {type(key).__name__}: JSON keys are text")
            _name_the_culprit(inner, path + (key,))
    elif isinstance(value, (list, tuple)):
        for index, inner in enumerate(value):
            _name_the_culprit(inner, path + (index,))
    else:
        _check_scalar(value, path, column=False)


def _check_scalar(value, path: tuple, column: bool) -> None:
    if isinstance(value, PLAIN):
        return
    if isinstance(value, int):
        if column and not INT_RANGE[0] <= value <= INT_RANGE[1]:
            raise BadItem(f"item key {_show(path)} holds {value}, beyond the widest integer column")
        return
    if isinstance(value, (float, Decimal)):
        if not (value.is_finite() if isinstance(value, Decimal) else math.isfinite(value)):
            raise BadItem(f"item key {_show(path)} holds {value}, which the database cannot store")
        return
    if column and isinstance(value, timedelta):
        return
    raise BadItem(f"item key {_show(path)} holds a {type(value).__name__}, which "
                  f"{'a column' if column else 'a JSON document'} cannot store")


def _show(path: tuple) -> str:
    """'tags' for a top-level key, 'meta.sizes[2]' inside it."""
    text = str(path[0])
    for part in path[1:]:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return repr(text)
