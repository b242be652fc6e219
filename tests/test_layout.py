"""The house by role (docs/architecture.md, Who imports whom): the rooms of batchd/ (a loose module, or a
folder with everything under it), the floor each stands on, and the imports between them read from the
source (every import: at the top, inside functions, under TYPE_CHECKING).

An arrow may only run down to a lower floor; the loose modules every role shares stand on floor 0 together
and may import each other as long as no circle forms; two folders on one floor do not import each other."""
import ast
import importlib.metadata
import pathlib
import tomllib

import pytest

import batchd

PACKAGE = pathlib.Path(batchd.__file__).parent
SHARED = ("errors", "release", "codec", "http", "schedule", "task", "config", "model", "item")
FLOORS = {**{name: 0 for name in SHARED},
          "service": 1, "hosts": 1, "recrawl": 1, "archive": 1,
          "backends": 2, "alerts": 2, "render": 2,
          "download": 3, "settle": 3, "core": 3, "quality": 3, "sitemaps": 3,
          "worker": 4, "master": 4,
          "assembly": 5, "reporting": 5,
          "runtime": 6, "control": 6, "export": 6,
          "spider": 7,
          "__init__": 8, "supervisor": 8, "web": 8,
          "cli": 9,
          "__main__": 10}
MOST_LOOSE_MODULES = 12
CODE_IN_INIT = ("backends",)      # the backends' open_backend() entry points: a package per store


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imported_modules(module: str) -> set:
    """Every batchd module `module` imports, wherever the import stands."""
    path = MODULES[module]
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] + [node.module or ""]).strip(".") \
                if node.level else node.module or ""
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name.startswith("batchd"):
                found.add(name)
    return found


def arrows() -> set:
    """(from room, to room) for every import across rooms."""
    return {(room(module), room(target)) for module in MODULES for target in imported_modules(module)
            if room(module) != room(target)}


def test_every_room_has_a_floor():
    assert {room(module) for module in MODULES} == set(FLOORS)


def test_few_modules_stay_loose():
    loose = sorted(path.name for path in PACKAGE.glob("*.py") if path.name not in ("__init__.py", "__main__.py"))
    assert len(loose) <= MOST_LOOSE_MODULES, loose


def test_arrows_run_only_down():
    up_or_across = sorted((a, b) for a, b in arrows()
                          if FLOORS[b] > FLOORS[a] or (FLOORS[a] == FLOORS[b] and FLOORS[a] > 0))
    assert up_or_across == []


def test_no_import_circle_between_modules():
    graph = {module: imported_modules(module) - {module} for module in MODULES}
    done, path = set(), []

    def visit(module):
        if module in path:
            pytest.fail("import circle: " + " -> ".join(path[path.index(module):] + [module]))
        if module in done:
            return
        path.append(module)
        for target in sorted(graph[module]):
            visit(target)
        path.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)


def test_subpackages_are_folders_not_code():
    """A role's package holds modules; its __init__ only says what the folder is (the backends excepted)."""
    for path in PACKAGE.glob("*/**/__init__.py"):
        body = ast.parse(path.read_text()).body
        folder = path.parent.relative_to(PACKAGE).parts[0]
        assert body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant), \
            f"{path} has no docstring saying what the folder is"
        if folder not in CODE_IN_INIT:
            assert len(body) == 1, f"{path} holds code: it belongs in a module of the folder"


def test_the_version_is_the_projects():
    """pyproject.toml reads it from batchd/release.py; what is installed says the same."""
    with open(PACKAGE.parent / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "batchd.release.VERSION"}
    assert batchd.__version__ == importlib.metadata.version("batchd")


def test_every_module_says_first_what_it_is_for():
    """A module opens with a docstring, its first line a sentence of what the module is for."""
    mute = [str(path.relative_to(PACKAGE)) for path in MODULES.values()
            if len((ast.get_docstring(ast.parse(path.read_text())) or "").split(" ")) < 4]
    assert not mute, f"modules whose first line does not say what they are for: {mute}"


def test_no_two_modules_share_a_file_name():
    """One file name, one module: `batchd.web.html` and `batchd.x.html` would read alike in an import."""
    by_name: dict = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name != "__init__.py":
            by_name.setdefault(path.name, []).append(str(path.relative_to(PACKAGE)))
    assert not {name: paths for name, paths in by_name.items() if len(paths) > 1}


def test_the_tests_follow_the_code():
    """tests/ mirrors the repository: a module's tests sit in the folder of its path (tests/worker/ for
    batchd/worker/, tests/bench/ for bench/), the chaos suite in tests/chaos/, the loose modules' at the top."""
    tests = PACKAGE.parent / "tests"
    mirrored = {path.relative_to(tests) for path in tests.rglob("test_*.py")}
    misplaced = [str(path) for path in mirrored if len(path.parts) > 1 and path.parts[0] != "chaos"
                 and not (PACKAGE / path.parent).is_dir() and not (PACKAGE.parent / path.parent).is_dir()]
    assert not misplaced, f"test modules in a folder that mirrors nothing: {sorted(misplaced)}"
    loose = sorted(path.stem[len("test_"):] for path in mirrored if len(path.parts) == 1)
    assert all((PACKAGE / f"{name}.py").exists() or name in ("layout", "netns") for name in loose), loose
