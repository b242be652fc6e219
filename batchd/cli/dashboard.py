"""`batchd web [SPIDER ...] [--listen ADDR:PORT]`: serve the dashboard of the namespaces of the spiders named
(SPIDER in the config file by default) until SIGTERM or SIGINT (batchd-web.service runs it)."""
import argparse
import logging
import os
import signal
from typing import Optional

from ..errors import ConfigError, ExitCode
from ..service.lifecycle import StopFlag
from ..service.systemd import Notifier, setup_logging
from ..service.threads import start_thread
from ..supervisor.loader import build_runtime
from .arguments import SPIDER_HELP, VerbGroup, config_and_store, config_files, spider_source
from ..web.api import Dashboard
from ..web.routes import make_router
from ..web.server import DashboardServer

log = logging.getLogger("batchd.web")

VERBS = VerbGroup()


def web_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spiders", nargs="*", metavar="SPIDER",
                        help=f"the spiders, one per namespace shown: {SPIDER_HELP}")
    config_and_store(parser)
    parser.add_argument("--listen", metavar="ADDR:PORT",
                        help="where to serve it (default: WEB_LISTEN, 127.0.0.1:9380; anything but loopback shows "
                             "it to the network)")


@VERBS.verb("web", "serve the dashboard and its JSON API (/api/)", web_arguments,
            examples=("batchd web crawl_task.py:CrawlTask", "batchd web news.py:News shop.py:Shop --listen [::1]:9380"),
            exits=((ExitCode.OK, "stopped (SIGTERM, SIGINT)"), ExitCode.CONFIG))
def web_verb(args: argparse.Namespace) -> int:
    runtimes = [_runtime(args, spider) for spider in (args.spiders or [None])]
    settings = runtimes[0].settings
    setup_logging(settings.LOG_LEVEL)
    token = read_token(settings.WEB_TOKEN, settings.WEB_TOKEN_FILE)
    server = DashboardServer(args.listen or settings.WEB_LISTEN, make_router(Dashboard(runtimes, token)), token)
    stop = StopFlag()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.request())
    start_thread(server.serve_forever, "batchd-web")
    names = ", ".join(runtime.namespace for runtime in runtimes)
    log.info("serving the dashboard of %s on %s (actions %s)", names, server.url,
             "on: they take the bearer token" if token else "off: no WEB_TOKEN")
    notifier = Notifier()
    notifier.ready(f"serving {names} on {server.url}")
    stop.wait()
    notifier.stopping("stopping")
    server.shutdown()
    server.server_close()
    return 0


def _runtime(args: argparse.Namespace, spider):
    args.spider = spider
    source, _ = spider_source(args, config_files(args), {})
    return build_runtime(source)


def read_token(token: Optional[str], path: Optional[str]) -> Optional[str]:
    """WEB_TOKEN, else the first line of WEB_TOKEN_FILE, else None (read-only); a ConfigError names the file
    that cannot be read or holds no token. Never logged."""
    if token is not None:
        if not token.strip():
            raise ConfigError("WEB_TOKEN: is empty; unset it for a read-only dashboard")
        return token.strip()
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as file:
            line = file.readline().strip()
    except OSError as e:
        raise ConfigError(f"WEB_TOKEN_FILE {path}: cannot be read: {e.strerror or e}") from None
    if not line:
        raise ConfigError(f"WEB_TOKEN_FILE {path}: holds no token on its first line")
    if os.stat(path).st_mode & 0o004:
        log.warning("WEB_TOKEN_FILE %s: every user of this host can read it (chmod 640)", path)
    return line
