"""`batchd.Item`: items that declare their fields, their table and the key they are upserted on.

    class Product(batchd.Item):
        __table__ = "products"          # its column table; none: the spider's item table, as a dict
        __unique_key__ = ("sku",)       # upsert on these columns (the table has a UNIQUE index on them)
        sku = batchd.Field(required=True)
        name = batchd.Field()
        price = batchd.Field(default=None)

A field may also say what a good value looks like: `Field(type=float)`, `Field(pattern=r"[0-9]+ EUR")`
(the value as text must match it whole), `Field(check=callable)` (True for a good value). Nothing is
refused for it: a value that fails counts as missing in the batch's quality figures (batchd/quality/), and
is counted for its field, so a site that starts sending "N/A" for a price is flagged like one that sends
nothing.

An Item is a mutable mapping of its declared fields (so the worker takes it as it takes a dict):
`Product(sku="a1")`, `item["price"] = 3`, `item.get("name")`. A field never set is left out of the
row (the column keeps its default, or its old value in an upsert) unless it has a `default`.

Mistakes are told where they are made, one line naming the class: a bad table or field name, or a
unique key naming no field, when the class is defined (ConfigError); a field that is not declared,
when it is set (UndeclaredField, which fails the task like any error of a callback). A required
field still missing (or None) when the item is yielded is the pipeline's business: the item is not
stored, and counted. The fields of a unique key are required: a NULL key never matches a row, so
each re-crawl would add one.
"""
import copy
import re
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, ClassVar, Optional

from .config import check_identifier
from .errors import ConfigError
from .model import COLUMNS_ITEM_KIND, ItemDestination

IMMUTABLE_DEFAULTS = (str, int, float, bool, bytes, type(None), tuple, frozenset)


class Field:
    """One declared field of an Item. `required`: an item without a value (or with None) here is not
    stored. `default`: the value of a field never set (copied for each item); without one, an unset
    field is not written at all. `type`, `pattern`, `check`: what a good value looks like (`accepts`)."""

    _NO_DEFAULT: ClassVar[object] = object()

    def __init__(self, required: bool = False, default: Any = _NO_DEFAULT, *, type: Any = None,
                 pattern: Optional[str] = None, check: Optional[Callable[[Any], bool]] = None):
        self.required, self.default = required, default
        self.type, self.check = type, check
        try:
            self.pattern = re.compile(pattern) if pattern is not None else None
        except re.error as e:
            raise ConfigError(f"Field(pattern={pattern!r}): not a regular expression ({e})") from None

    def accepts(self, value: Any) -> bool:
        """Whether a value (not empty) looks as this field says a good one does. A check that raises is a
        value it refuses: the spider's predicate must not fail the task for a quality figure."""
        if self.type is not None and not isinstance(value, self.type):
            return False
        if self.pattern is not None and not self.pattern.fullmatch(str(value)):
            return False
        if self.check is not None:
            try:
                return bool(self.check(value))
            except Exception:
                return False
        return True

    @property
    def has_default(self) -> bool:
        return self.default is not Field._NO_DEFAULT

    def fresh_default(self) -> Any:
        return self.default if isinstance(self.default, IMMUTABLE_DEFAULTS) else copy.deepcopy(self.default)

    def __repr__(self) -> str:
        shown = [f"required={self.required}"] + ([f"default={self.default!r}"] if self.has_default else [])
        shown += [f"{name}={value!r}" for name, value in (("type", self.type), ("check", self.check)) if value is not None]
        if self.pattern is not None:
            shown.append(f"pattern={self.pattern.pattern!r}")
        return f"Field({', '.join(shown)})"


class UndeclaredField(KeyError):
    """A key set on an Item that its class does not declare."""

    def __str__(self) -> str:        # KeyError would quote the whole message
        return str(self.args[0])


class Item(MutableMapping):
    __table__: ClassVar[Optional[str]] = None
    __unique_key__: ClassVar[tuple] = ()
    __fields__: ClassVar[dict] = {}       # name -> Field, the bases' first (made by __init_subclass__)
    __slots__ = ("_values",)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        own = {name: value for name, value in vars(cls).items() if isinstance(value, Field)}
        for name in own:
            delattr(cls, name)           # item["name"], never item.name: the class keeps no Field in the way
        cls.__fields__ = {**cls.__fields__, **own}
        _check_declaration(cls)

    def __init__(self, values=(), **more):
        self._values = {name: f.fresh_default() for name, f in self.__fields__.items() if f.has_default}
        self.update(values, **more)

    # -- the mapping
    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def __setitem__(self, name: str, value: Any) -> None:
        if name not in self.__fields__:
            raise UndeclaredField(f"{type(self).__name__} has no field {name!r} (its fields: "
                                  f"{', '.join(self.__fields__) or 'none'})")
        self._values[name] = value

    def __delitem__(self, name: str) -> None:
        del self._values[name]

    def __iter__(self) -> Iterator[str]:
        """In the order the fields are declared, however they were set: items of a class that set the same
        fields make one multi-row INSERT."""
        return (name for name in self.__fields__ if name in self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.items())})"

    def __getattr__(self, name: str) -> Any:
        if name in type(self).__fields__:
            raise AttributeError(f"{type(self).__name__}: read the field as item[{name!r}]")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in Item.__slots__:
            object.__setattr__(self, name, value)
        else:
            raise AttributeError(f"{type(self).__name__}: set the field as item[{name!r}] = ...")

    # -- what the pipeline asks
    def missing_required(self) -> Optional[str]:
        """The first required field without a value (or holding None); None when every one has one."""
        return next((name for name, f in self.__fields__.items()
                     if (f.required or name in self.__unique_key__) and self._values.get(name) is None), None)

    @classmethod
    def destination(cls, fallback: ItemDestination) -> ItemDestination:
        """Where items of this class go: its own table, else `fallback` (the spider's item table)."""
        if cls.__table__ is None:
            return fallback
        return ItemDestination(cls.__table__, COLUMNS_ITEM_KIND, cls.__unique_key__)


def _check_declaration(cls: "type[Item]") -> None:
    """ConfigError, one line naming the class, for a table, a field or a unique key that cannot be."""
    name = cls.__name__
    if cls.__table__ is not None:
        check_identifier(cls.__table__, f"{name}.__table__")
    for field in cls.__fields__:
        check_identifier(field, f"{name}: field")
    key = (cls.__unique_key__,) if isinstance(cls.__unique_key__, str) else cls.__unique_key__
    if not isinstance(key, (tuple, list)) or not all(isinstance(column, str) for column in key):
        raise ConfigError(f"{name}.__unique_key__: {key!r} is not a tuple of field names")
    cls.__unique_key__ = key = tuple(key)
    undeclared = [column for column in key if column not in cls.__fields__]
    if undeclared:
        raise ConfigError(f"{name}.__unique_key__ names {undeclared[0]!r}, which is not a field of {name}")
    if len(set(key)) != len(key):
        raise ConfigError(f"{name}.__unique_key__ {key!r} names a field twice")
    if key and cls.__table__ is None:
        raise ConfigError(f"{name}.__unique_key__ needs a __table__: the upsert is on that table's columns")
