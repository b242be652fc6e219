"""`batchd web`: the operator's dashboard and its JSON API (docs/web.md).

server.py is the HTTP plumbing (bounded requests, one guarded thread each, the bearer token), api.py what
each route answers, read from the sources `batchd status` reads, pages.py and charts.py the HTML and its
server-drawn SVG, assets.py the page's one stylesheet and script, verb.py the command.
"""
