"""Which release of batchd this is: pyproject.toml reads its version from here (setuptools' dynamic `attr`,
read from the source without importing it), so that batchd knows its own without asking the installed
package's metadata, which costs every process 28 ms of its start (importlib.metadata)."""

VERSION = "0.1.0"
