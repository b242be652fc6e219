"""The dashboard's stylesheet and script, served from /static/ (the pages allow no inline ones).

The script does two things: it reloads the page every data-refresh seconds (not while the token field has
the focus or an action is on its way, nor for one such period after an action's answer is shown, so that it
can be read), and it sends an action (a button's data-action, with its data-reason)
as a POST with the token from the field as `Authorization: Bearer`, showing the answer as text. The token is
kept in the tab's sessionStorage, never in a cookie or the page.
"""

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1d2330; background: #f6f7f9; }
header { display: flex; gap: 1.5em; align-items: center; padding: .6em 1.2em; background: #1d2330; color: #fff; }
header a { color: #c9d3e6; text-decoration: none; margin-right: 1em; }
header a.here, header a.brand { color: #fff; font-weight: 600; }
header .ns { font-family: monospace; color: #9fb3d9; }
main { padding: 0 1.2em 1em; max-width: 1100px; }
section { background: #fff; border: 1px solid #dde1e8; border-radius: 6px; padding: .4em 1em 1em; margin: 1em 0; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; } h3 { font-size: 1em; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { padding: .25em .7em; border-bottom: 1px solid #e5e8ee; text-align: left; vertical-align: top; }
td.url, td.reason { font-family: monospace; word-break: break-all; max-width: 40em; }
table.figures td { font-size: 1.3em; font-variant-numeric: tabular-nums; }
.missing, .error { color: #a11; font-weight: 600; } .paused { color: #a60; font-weight: 600; }
.verdict { font-size: 1.1em; font-weight: 600; }
td.flagged { background: #f8d7d3; color: #a11; font-weight: 600; } li.flag { color: #a11; }
.breaker-open, .breaker-down { color: #a11; font-weight: 600; } .breaker-probing { color: #a60; }
.legend .done-count { color: #2f9e5b; font-weight: 600; } .legend .failed-count { color: #d04a3a; font-weight: 600; }
p.note, #chart-source { color: #6b7385; font-size: .9em; }
footer { color: #6b7385; padding: 1em 1.2em; font-size: .9em; }
button { margin-right: .4em; } #action-result { font-family: monospace; }
svg.chart { display: block; background: #fff; margin: .5em 0; max-width: 100%; height: auto; }
svg .frame { fill: #fbfcfd; stroke: #c5ccd8; } svg .grid { stroke: #e5e8ee; }
svg .axis, svg .note { font: 11px system-ui, sans-serif; fill: #6b7385; }
svg .line { fill: none; stroke: #2b6cd4; stroke-width: 2; } svg .line.from-record { stroke-dasharray: 8 4; }
svg .done { fill: #2f9e5b; } svg .failed { fill: #d04a3a; } svg .todo { fill: #e3e7ee; }
svg .line-bar { fill: #2b6cd4; } svg .items { fill: #8a5cd0; }
"""

SCRIPT = """
"use strict";
(function () {
  var body = document.body, busy = false, quietUntil = 0;
  var seconds = parseFloat(body.dataset.refresh || "0");
  var token = document.getElementById("token");
  var said = document.getElementById("action-result");
  if (token) {
    token.value = sessionStorage.getItem("batchd-token") || "";
    token.addEventListener("input", function () { sessionStorage.setItem("batchd-token", token.value); });
  }
  if (seconds > 0) {
    setInterval(function () {
      if (!busy && document.activeElement !== token && Date.now() >= quietUntil) { location.reload(); }
    }, seconds * 1000);
  }
  document.querySelectorAll("button[data-action]").forEach(function (button) {
    button.addEventListener("click", function () {
      var query = "namespace=" + encodeURIComponent(body.dataset.namespace);
      if (button.dataset.reason) { query += "&reason=" + encodeURIComponent(button.dataset.reason); }
      var headers = {};
      if (token && token.value) { headers["Authorization"] = "Bearer " + token.value; }
      busy = true;
      said.textContent = button.dataset.action + "...";
      fetch("/api/" + button.dataset.action + "?" + query, {method: "POST", headers: headers})
        .then(function (answer) {
          return answer.json().then(function (data) {
            said.textContent = answer.status + ": " + (data.said || data.error || "");
            said.dataset.status = String(answer.status);
          });
        })
        .catch(function (error) { said.textContent = "failed: " + error; })
        .finally(function () { busy = false; quietUntil = Date.now() + seconds * 1000; });
    });
  });
})();
"""
