"""The loader of the Redis ports' Lua scripts: each lua/*.lua file read once, registered once per port's client.

Every step that must not be split (pop and lease, check the owner and renew or release, find the expired and
remove them, a flush applied once, a breaker's step) is one script, so it is atomic on the server. The
scripts are plain files, so that they can be read, diffed, linted and tried as they stand
(`redis-cli --eval lua/known_tasks.lua ns:queued ns:leases , task:1`); each says at its top what its KEYS
and ARGV are and what it returns.

A port names its scripts as class attributes (`_lease = LuaScript("lease_tasks")`). The file is read when
the port's module is imported, from the installed package (importlib.resources: a wheel, the Debian package
or a checkout alike), so a missing file stops the import rather than a call. A script is registered with
redis-py (`register_script`) the first time a port instance uses it: its calls are EVALSHA, and the server
is sent the source only when it answers NOSCRIPT (the first call on a server, or after a restart or a
SCRIPT FLUSH), never at every call. A script's errors are Redis errors like any other: the port's method
maps them (redis_port.translated).
"""
from importlib import resources
from typing import Any

PACKAGE = __name__.rpartition(".")[0]
SCRIPTS = "lua"     # the folder of the .lua files, in this module's package


def script_source(name: str) -> str:
    """The text of lua/<name>.lua, as installed."""
    return (resources.files(PACKAGE) / SCRIPTS / f"{name}.lua").read_text(encoding="utf-8")


class LuaScript:
    """A script of lua/, as a port's class attribute: on a port instance, the script registered with that
    port's client (redis-py's Script: EVALSHA, the source loaded only when the server lacks it)."""

    def __init__(self, name: str):
        self.name = name
        self.source = script_source(name)
        self.attribute = ""

    def __set_name__(self, owner, attribute: str) -> None:
        self.attribute = f"_registered{attribute}"

    def __get__(self, port, owner=None) -> Any:
        if port is None:
            return self
        registered = port.__dict__.get(self.attribute)
        if registered is None:
            registered = port.__dict__[self.attribute] = port.redis.register_script(self.source)
        return registered


def run_registered(script, keys: list, args: list) -> Any:
    """A registered script's EVALSHA, straight: redis-py's Script call imports its pipeline classes at every
    call, a microsecond that counts on the path of every request through the bloom filter. The source is sent
    when the server lacks it, as that call does."""
    try:
        return script.registered_client.evalsha(script.sha, len(keys), *keys, *args)
    except Exception as error:
        import redis.exceptions
        if not isinstance(error, redis.exceptions.NoScriptError):
            raise
        return script(keys=keys, args=args)
