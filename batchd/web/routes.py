"""The dashboard's routes: a path to an answer (docs/web.md lists them).

    GET  /                      the namespaces (one: its batch page)
    GET  /ns/NS/[hosts|failures|history|quality]      the pages (html.py); quality takes ?batch=N
    GET  /api/namespaces | status | batch | why | hosts | history | failures | quality
                                ?namespace=NS (the first by default); quality takes ?batch=N (the last closed)
    POST /api/pause | resume | open-batch | requeue                      only with a token (server.py)
    GET  /static/app.css | app.js

A backend that cannot be read answers 503 with its words, a page as HTML and the API as JSON; an unknown
namespace 404, and /api/quality for a batch not closed yet (its quality is judged at its close; the quality
page says so beside its tabs); a batch that is no number 400; open-batch while a batch is open (without force=1)
409.
"""
import logging
import re
from typing import Callable, Optional
from urllib.parse import unquote

from ..errors import BatchdError
from ..control.actions import BatchStillOpen
from ..reporting.failed_tasks import NoSuchBatch
from . import assets, html
from .api import ACTIONS, Dashboard, StoreBusy, action_arguments, outage_words
from .server import Answer, Request

log = logging.getLogger("batchd.web")

HTML = "text/html; charset=utf-8"
BATCH_NUMBER = re.compile(r"[1-9][0-9]{0,17}")
STATIC = {"/static/app.css": (assets.STYLE, "text/css; charset=utf-8"),
          "/static/app.js": (assets.SCRIPT, "text/javascript; charset=utf-8")}


def make_router(dashboard: Dashboard) -> Callable[[Request], Answer]:
    api = {"namespaces": lambda q: dashboard.namespaces(),
           "status": lambda q: dashboard.status(q.get("namespace")),
           "batch": lambda q: dashboard.batch(q.get("namespace")),
           "why": lambda q: dashboard.why(q.get("namespace")),
           "hosts": lambda q: dashboard.hosts(q.get("namespace")),
           "history": lambda q: dashboard.history(q.get("namespace")),
           "failures": lambda q: dashboard.failures(q.get("namespace"), q.get("reason")),
           "quality": lambda q: dashboard.quality(q.get("namespace"), _batch_asked(q))}

    def route(request: Request) -> Answer:
        path = request.path
        try:
            if path.startswith("/api/"):
                return _api(dashboard, api, request, path[len("/api/"):])
            if request.method != "GET":
                return Answer.error(405, "the pages are read with GET; actions are POST /api/ACTION")
            if path in STATIC:
                text, kind = STATIC[path]
                return Answer(200, text.encode(), kind)
            return _page(dashboard, request)
        except KeyError as e:
            return _failed(path, 404, f"no namespace {e.args[0]!r} is shown here")
        except BadQuery as e:
            return _failed(path, 400, str(e))
        except NoSuchBatch as e:
            return _failed(path, 404, str(e))
        except BatchStillOpen as e:
            return _failed(path, 409, str(e))
        except (BatchdError, StoreBusy) as e:
            return _failed(path, 503, outage_words(e))

    return route


class BadQuery(ValueError):
    """A query string's value the route cannot take."""


def _batch_asked(query: dict) -> Optional[int]:
    """?batch=N: a batch number, or None when none is asked."""
    text = query.get("batch")
    if text is None:
        return None
    if not BATCH_NUMBER.fullmatch(text):
        raise BadQuery(f"batch={text[:40]!r}: a batch is a number, 1 or more")
    return int(text)


def _failed(path: str, status: int, words: str) -> Answer:
    if path.startswith("/api/"):
        return Answer.error(status, words)
    return Answer(status, html.error_page(words).encode(), HTML)


def _api(dashboard: Dashboard, api: dict, request: Request, name: str) -> Answer:
    if request.method == "GET" and name in api:
        return Answer.json(api[name](request.query))
    if name not in ACTIONS or not dashboard.actions:
        return Answer.error(404, f"no such API: {request.method} /api/{name}")
    if request.method != "POST":
        return Answer.error(405, f"/api/{name} is an action: POST it", {"Allow": "POST"})
    if not request.authorized:
        status, words = ((401, "an action needs Authorization: Bearer TOKEN") if not request.header_given
                         else (403, "the token is not this dashboard's"))
        return Answer.error(status, words, {"WWW-Authenticate": 'Bearer realm="batchd"'} if status == 401 else None)
    arguments = action_arguments(request.query, request.body)
    return Answer.json({"action": name, "said": dashboard.act(name, arguments.get("namespace"), arguments)})


def _page(dashboard: Dashboard, request: Request) -> Answer:
    path, namespaces = request.path, list(dashboard.runtimes)
    if path == "/":
        if len(namespaces) == 1:
            return Answer(303, b"", HTML, {"Location": f"/ns/{namespaces[0]}/"})
        return Answer(200, html.index_page([_index_entry(dashboard, n) for n in dashboard.namespaces()]).encode(),
                      HTML)
    parts = path.split("/")
    if len(parts) != 4 or parts[1] != "ns":
        return Answer(404, html.error_page(f"no page at {path}").encode(), HTML)
    namespace, tab = unquote(parts[2]), parts[3]
    dashboard.runtime(namespace)                         # KeyError: 404
    page = _tab(dashboard, namespace, tab, namespaces, request.query)
    if page is None:
        return Answer(404, html.error_page(f"no page at {path}").encode(), HTML)
    return Answer(200, page.encode(), HTML)


def _tab(dashboard: Dashboard, namespace: str, tab: str, namespaces: list, query: dict) -> Optional[str]:
    if tab == "":
        return html.batch_page(dashboard.status(namespace), dashboard.batch(namespace), dashboard.why(namespace),
                               namespaces, dashboard.actions, dashboard.last_quality(namespace))
    if tab == "hosts":
        return html.hosts_page(dashboard.hosts(namespace), namespaces)
    if tab == "failures":
        return html.failures_page(namespace, dashboard.failures(namespace, query.get("reason")), namespaces,
                                  dashboard.actions)
    if tab == "history":
        return html.history_page(namespace, dashboard.history(namespace), namespaces)
    if tab == "quality":         # (a batch not closed yet is said on the page, beside its tabs)
        try:
            return html.quality_page(namespace, dashboard.quality(namespace, _batch_asked(query)), namespaces)
        except NoSuchBatch as e:
            return html.quality_page(namespace, None, namespaces, str(e))
    return None


def _index_entry(dashboard: Dashboard, entry: dict) -> dict:
    try:
        status = dashboard.status(entry["namespace"])
    except (BatchdError, StoreBusy) as e:
        return {**entry, "summary": outage_words(e)}
    batch, tasks = status["batch"], status["tasks"]
    if batch is None or tasks is None:
        return {**entry, "summary": "no batch yet"}
    return {**entry, "summary": f"batch {batch['id']}: {tasks['settled']}/{tasks['total']} settled"
                                + (", finished" if batch["is_done"] else "")}
