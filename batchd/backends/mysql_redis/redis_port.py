"""What every Redis port stands on: one client, the key layout, and Redis's failures told as batchd's errors.

The mapping is here and nowhere else: every method of a port that reaches Redis (a command, a pipeline, a
Lua script of lua_scripts.py) is `translated`, so that a failure leaves it as

    BackendUnavailable   Redis cannot answer now (unreachable, a replica promoted, a full memory, a busy
                         script, a dataset loading): every process of batchd waits it out
    ConfigError          Redis refused the URL's password, user or database number: waiting cannot mend
                         it (exit 78)
    the error itself     anything else is a bug, and reaches the thread guard
"""
import functools
import re

from ...config import redact_url
from ...errors import BackendUnavailable, ConfigError
from ...service.threads import guard
from .redis_client import sentinels_said
from .redis_keys import Keys

# Replies that mean "not now" (a replica promoted, a full memory, a busy script) rather than "wrong".
TRANSIENT_REPLIES = ("OOM", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "BUSY", "LOADING")
# Replies that waiting cannot mend: the URL's password, user or database number (exit 78).
# (redis-py strips a leading "ERR " from some replies.)
REFUSAL_REPLIES = ("NOAUTH", "WRONGPASS", "NOPERM", "invalid password", "invalid username-password",
                   "invalid DB index", "DB index is out of range", "ERR invalid DB index", "ERR DB index",
                   "AUTH <password> called without", "ERR AUTH <password> called without")
CALL_BOUND = 40.0     # the longest a call can block: connect timeout + socket timeout, with a margin


IN_A_PIPELINE = re.compile(r"^Command # \d+ \(.*?\) of pipeline caused error: ")
CONNECT_ERROR = re.compile(r"Error -?\d+ connecting to \S+?\. (.+)$")      # redis-py's text of a socket error


def transient_classes(errors) -> tuple:
    """The reply classes redis-py strips the TRANSIENT_REPLIES prefix from (which classes depends on its
    version: 8 has OutOfMemoryError, 4.3 leaves "OOM ..." a ResponseError)."""
    return tuple(getattr(errors, name) for name in ("ReadOnlyError", "OutOfMemoryError", "BusyLoadingError",
                                                   "MasterDownError", "TryAgainError", "ClusterDownError")
                 if hasattr(errors, name))


def redis_response_error():
    import redis.exceptions
    return redis.exceptions.ResponseError


def translate_redis_error(error, url: str) -> Exception:
    """The batchd error a Redis failure stands for: BackendUnavailable (wait it out), ConfigError (the
    operator must fix REDIS_URL), or the error itself (a bug: it reaches the thread guard)."""
    import redis.exceptions as errors
    from redis.sentinel import MasterNotFoundError
    text = IN_A_PIPELINE.sub("", str(error))       # the reply, not where in a MULTI it came (redis-py 4)
    if isinstance(error, MasterNotFoundError):     # its text holds every Sentinel's client, repr'd: not for a log
        return sentinels_said(error, url)
    if isinstance(error, (errors.AuthenticationError, errors.AuthorizationError)) or text.startswith(REFUSAL_REPLIES):
        return ConfigError(f"setting REDIS_URL: Redis {redact_url(url)} refused us: {text}")
    if isinstance(error, (errors.ConnectionError, errors.TimeoutError, *transient_classes(errors))) \
            or text.startswith(TRANSIENT_REPLIES):
        return BackendUnavailable(f"Redis {redact_url(url)} unreachable: {plain_connect_error(text)}", "Redis")
    return error


def plain_connect_error(text: str) -> str:
    """redis-py's "Error 111 connecting to localhost:6379. Connection refused." as "connection refused" (the URL
    is named beside it already); any other text as it is, without its closing full stop."""
    found = CONNECT_ERROR.match(text)
    said = found.group(1) if found else text
    said = said.rstrip(".")
    return said[:1].lower() + said[1:] if found else said


def translated(method):
    """Every Redis call: connection failures leave as BackendUnavailable, refusals of the URL's credentials
    as ConfigError; the calling thread promises to be back within the client's timeouts."""
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        import redis
        try:
            with guard.waiting(CALL_BOUND):
                return method(self, *args, **kwargs)
        except redis.RedisError as e:
            translated_error = translate_redis_error(e, self.url)
            if translated_error is e:
                raise
            raise translated_error from None
    return call


class RedisPort:
    """What the ports of one namespace share: one client (one connection pool per process), the URL for
    messages (never the password), the key layout."""

    def __init__(self, url: str, namespace: str, client):
        self.url, self.namespace, self.keys, self.redis = url, namespace, Keys(namespace), client

    def close(self) -> None:
        self.redis.close()
