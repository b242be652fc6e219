"""The dashboard (`batchd web`): the operator's window on a namespace and its JSON API (docs/web.md).

server.py is the HTTP plumbing (bounded requests, one guarded thread each, the bearer token), api.py what
each route answers, read from the sources `batchd status` reads, html.py and charts.py the HTML and its
server-drawn SVG, assets.py the page's one stylesheet and script, routes.py a path to its answer; the
command that serves it is batchd/cli/dashboard.py.
"""
