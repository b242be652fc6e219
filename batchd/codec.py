"""JSON that keeps the types a database row holds: task payloads in queues, failed items on disk.

A row from MySQL carries datetimes, dates, Decimals and bytes; plain JSON would hand the
spider strings instead, so those are wrapped in a small object that names the type.
Items stored as JSON documents use `plain_json`, where such values become strings.
"""
import base64
import json
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, Callable

_TAG = "$batchd"


def _wrap(value):
    if isinstance(value, datetime):
        return {_TAG: "datetime", "v": value.isoformat()}
    if isinstance(value, date):
        return {_TAG: "date", "v": value.isoformat()}
    if isinstance(value, time):
        return {_TAG: "time", "v": value.isoformat()}
    if isinstance(value, timedelta):
        return {_TAG: "timedelta", "v": value.total_seconds()}
    if isinstance(value, Decimal):
        return {_TAG: "decimal", "v": str(value)}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {_TAG: "bytes", "v": base64.b64encode(bytes(value)).decode("ascii")}
    raise TypeError(f"a task column holds a {type(value).__name__}, which batchd cannot queue")


_UNWRAP: dict[str, Callable[[Any], Any]] = {
    "datetime": datetime.fromisoformat,
    "date": date.fromisoformat,
    "time": time.fromisoformat,
    "timedelta": lambda v: timedelta(seconds=v),
    "decimal": Decimal,
    "bytes": base64.b64decode,
}


def _unwrap(obj: dict):
    if len(obj) == 2 and obj.get(_TAG) in _UNWRAP and "v" in obj:
        return _UNWRAP[obj[_TAG]](obj["v"])
    return obj


def dumps(obj) -> str:
    return json.dumps(obj, default=_wrap, ensure_ascii=False, separators=(",", ":"))


def loads(text):
    if isinstance(text, (bytes, bytearray)):
        text = text.decode("utf-8")
    return json.loads(text, object_hook=_unwrap)


def _as_text(value):
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    return str(value)


def plain_json(obj) -> str:
    """An item as a JSON document for a JSON column: dates and decimals as strings."""
    return json.dumps(obj, default=_as_text, ensure_ascii=False, separators=(",", ":"))


def _as_fit_text(value):
    """plain_json's strings for the values a JSON document may hold (item_checks.py): TypeError for the rest."""
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Decimal) and value.is_finite():
        return str(value)
    raise TypeError(f"a {type(value).__name__} has no place in a JSON document")


# One encoder for every strict_json call (json.dumps with arguments makes one per call); the C encoder's.
_STRICT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_as_fit_text)


def strict_json(obj) -> str:
    """plain_json's text, or TypeError / ValueError where a JSON document could not hold a value as it is
    (NaN and infinities, keys that are no JSON scalars, values of other types): a check and the document in
    one walk of C (worker/item_checks.py, item_document)."""
    return _STRICT.encode(obj)


def encode_task(key: str, batch_id: int, task_id, row: dict) -> str:
    return dumps({"key": key, "batch": batch_id, "id": task_id, "task": row})


decode_task = loads
