"""The spider's fingerprint, so that a batch knows when the spider changed since the batch before: a page
that answers 304 would otherwise never be parsed by the new code (issue 33, docs/recrawl.md).

Two digests (model.SpiderPrint):
- code: the source of the spider's module, or of every module of its package when it is in one (the top-level
  package: items and helpers usually sit beside the spider in it); the same for the user's own base classes of
  the spider and the Item classes its module names, wherever they live. Each file is read as Python compiles
  it, its line numbers left out, so that a comment or a change of layout alone is not a change; batchd's
  modules and Python's are not part of it. (A new Python may compile the same source otherwise: its first
  batch then parses every page again.)
- settings: the settings that shape what a page says, so what is parsed: the headers sent
  (DEFAULT_REQUEST_HEADERS, USER_AGENT, and each host's own headers in HOSTS). The settings that only pace
  or route requests, or say where items go, change no item a page yields and are left out; the item tables
  and the Item classes are in the code.

The print is taken when the master is built, once the spider is imported: it is the code this process runs,
whatever the files on disk say later (`batchd reload` builds a new master, and so a new print).
"""
import functools
import hashlib
import inspect
import json
import os
import sys
import types
from typing import Optional

from ..config import Settings
from ..item import Item
from ..model import SpiderPrint

ITEM_SHAPING_SETTINGS = ("DEFAULT_REQUEST_HEADERS", "USER_AGENT")
FILES_REMEMBERED = 4096


def spider_print(spider_class: type, settings: Settings) -> SpiderPrint:
    return SpiderPrint(code=code_digest(spider_class), settings=settings_digest(settings))


def settings_digest(settings: Settings) -> str:
    shaping = {name: getattr(settings, name) for name in ITEM_SHAPING_SETTINGS}
    shaping["HOSTS"] = {host: terms["headers"] for host, terms in settings.HOSTS.items() if "headers" in terms}
    return _sha1(json.dumps(shaping, sort_keys=True).encode())


def code_digest(spider_class: type) -> str:
    digest = hashlib.sha1()
    for name, path in sorted(source_files(spider_class).items()):
        digest.update(name.encode() + b"\0" + _source_digest(path).encode() + b"\0")
    return digest.hexdigest()


def source_files(spider_class: type) -> dict:
    """{a stable name: the path} of every file the code digest reads. Named by module, not by path, so that
    the same project deployed elsewhere keeps its print."""
    files: dict = {}
    for module in _user_modules(spider_class):
        files.update(_module_files(module))
    return files


def _user_modules(spider_class: type) -> set:
    """The modules of the spider class, of its bases that are not batchd's, and of the Item classes its module
    names."""
    own = sys.modules.get(spider_class.__module__)
    named_items = [value for value in vars(own).values()
                   if isinstance(value, type) and issubclass(value, Item)] if own is not None else []
    modules = {sys.modules.get(cls.__module__) for cls in [*spider_class.__mro__, *named_items]}
    return {module for module in modules if module is not None and not _is_batchd(module)}


def _is_batchd(module) -> bool:
    """batchd's modules and Python's own: an upgrade of either is not a change of the spider."""
    top = module.__name__.partition(".")[0]
    return top == "batchd" or top in sys.stdlib_module_names or top == "builtins"


def _module_files(module) -> dict:
    """The module's file, or every file of its top-level package."""
    spec = getattr(module, "__spec__", None)
    qualified = spec.name if spec is not None else module.__name__      # `python -m pkg.run`: __main__ is pkg.run
    top = qualified.partition(".")[0]
    package = sys.modules.get(top) if "." in qualified else None
    if package is not None and getattr(package, "__path__", None):
        return {f"{top}/{os.path.relpath(path, root)}": path for root in package.__path__
                for path in _python_files(root)}
    path = _file_of(module)
    return {qualified: path} if path else {}


def _python_files(root: str) -> list:
    found = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        found += [os.path.join(folder, name) for name in sorted(names) if name.endswith(".py")]
    return found


def _file_of(module) -> Optional[str]:
    try:
        return inspect.getsourcefile(module)
    except TypeError:       # a module with no file (made in code): nothing to read
        return None


def _source_digest(path: str) -> str:
    try:
        found = os.stat(path)
    except OSError as e:     # gone since it was imported: its absence is what is known of it
        return f"unreadable: {e.strerror}"
    return _file_digest(path, found.st_mtime_ns, found.st_size)


@functools.lru_cache(maxsize=FILES_REMEMBERED)
def _file_digest(path: str, mtime_ns: int, size: int) -> str:
    """The file's code as Python compiles it, without where each line is: a comment, a blank line or a change
    of layout alone compiles to the same; its bytes when it does not compile. Remembered by its path, time and
    size: a process that builds several masters or workers (tests, the in-process store) reads a package once.
    (Compiled, not parsed into a syntax tree: 2 ms a file of 12 KB rather than 4, on the way to a batch's
    opening.)"""
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        return f"unreadable: {e.strerror}"
    try:
        code = compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return _sha1(source)
    digest = hashlib.sha1()
    _add_code(digest, code)
    return digest.hexdigest()


def _add_code(digest, code: types.CodeType) -> None:
    """What a code object does, its nested ones' (functions, classes, comprehensions) in turn; not its lines
    (co_firstlineno, co_linetable) nor its file."""
    digest.update(b"%d %d %d %d %d\0" % (code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount,
                                        code.co_flags, code.co_stacksize))
    digest.update(code.co_code)
    digest.update(repr((code.co_name, code.co_names, code.co_varnames, code.co_freevars,
                        code.co_cellvars)).encode())
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            _add_code(digest, constant)
        else:
            digest.update(_constant_text(constant).encode() + b"\0")


def _constant_text(constant) -> str:
    """A constant as the same text in every process: a set's (`x in {"a", "b"}`) in sorted order, as its repr
    follows the string hashes of the process."""
    if isinstance(constant, frozenset):
        return "frozenset(" + ", ".join(sorted(map(_constant_text, constant))) + ")"
    if isinstance(constant, tuple):
        return "(" + ", ".join(map(_constant_text, constant)) + ")"
    return repr(constant)


def _sha1(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()
