"""Alert webhooks: what each format POSTs, how DingTalk and Feishu sign it, what an answer means, and
the thread that sends (for alerts.py).

    json      batchd's own payload: {"namespace", "kind", "batch", "message", "host", "time", ...figures};
              any 2xx answer takes it
    dingtalk  a DingTalk group robot: {"msgtype": "text", "text": {"content"}}; signed with
              ALERT_WEBHOOK_SECRET by `timestamp` (ms) and `sign` added to the URL's query; its answer is
              200 with {"errcode", "errmsg"}, errcode 0 when taken
    feishu    a Feishu (Lark) custom bot: {"msg_type": "text", "content": {"text"}}; signed by `timestamp`
              (s) and `sign` in the body; its answer is 200 with {"code", "msg"}, code 0 when taken
    wecom     a WeCom group robot: {"msgtype": "text", "text": {"content"}}; {"errcode", "errmsg"} as DingTalk
    slack     a Slack incoming webhook: {"text"}; answers 200 "ok", or an error status and a short word

A chat's text is the alert's one line: `batchd NAMESPACE@HOST ALERT KIND: MESSAGE`. With no
ALERT_WEBHOOK_FORMAT the webhook's host chooses (VENDOR_HOSTS). An answer that says no is logged once per
distinct error (the vendor's words escaped: they are not ours), not per alert; a success after it is said
at INFO. Neither the secret nor the webhook's path and query (a chat's access token) reach a log line.
"""
import base64
import hashlib
import hmac
import json
import logging
import queue
import threading
import time
from typing import Optional
from urllib.parse import quote_plus, urlsplit

import requests

from ..service.systemd import escape_controls
from ..service.threads import check_in, start_thread

log = logging.getLogger("batchd.alerts")

QUEUE_SIZE = 100              # alerts waiting for the webhook; more are only logged (the webhook is failing)
POST_TIMEOUT = 5.0            # seconds to connect, and to wait for the answer
IDLE_WAIT = 1.0               # seconds the sender sleeps on an empty queue between two check-ins
ANSWER_LIMIT = 16 * 1024      # bytes of a vendor's answer read to judge it
SHOWN_ANSWER = 300            # characters of a vendor's error shown in the log line
ERRORS_SAID = 16              # distinct errors logged while the webhook fails; more are not (a request id in each?)

# The hosts of the vendors' webhook URLs, and the format each takes.
VENDOR_HOSTS = {"oapi.dingtalk.com": "dingtalk", "open.feishu.cn": "feishu", "open.larksuite.com": "feishu",
                "qyapi.weixin.qq.com": "wecom", "hooks.slack.com": "slack"}


def webhook_format(url: str, configured: Optional[str] = None) -> str:
    """ALERT_WEBHOOK_FORMAT when set, else the format the webhook's host takes (json for any other host)."""
    return configured or VENDOR_HOSTS.get((urlsplit(url).hostname or "").lower(), "json")


def webhook_name(url: str) -> str:
    """The webhook as a log line names it: scheme and host only (the path of a chat's webhook is its secret)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "") + "/..."


def chat_text(payload: dict) -> str:
    return f"batchd {payload['namespace']}@{payload['host']} ALERT {payload['kind']}: {payload['message']}"


def dingtalk_sign(secret: str, millis: int) -> str:
    """DingTalk's signature, as its query takes it: HMAC-SHA256 of "millis\\nsecret" keyed by the secret,
    in base64, URL-encoded."""
    digest = hmac.new(secret.encode(), f"{millis}\n{secret}".encode(), hashlib.sha256).digest()
    return quote_plus(base64.b64encode(digest).decode())


def feishu_sign(secret: str, seconds: int) -> str:
    """Feishu's signature: HMAC-SHA256 keyed by "seconds\\nsecret" over nothing, in base64."""
    return base64.b64encode(hmac.new(f"{seconds}\n{secret}".encode(), b"", hashlib.sha256).digest()).decode()


def vendor_request(form: str, url: str, secret: Optional[str], payload: dict, now: float) -> tuple:
    """(URL, JSON body) of one alert in this format, signed at `now` (Unix seconds) when there is a secret."""
    if form == "json":
        return url, payload
    if form == "slack":
        return url, {"text": chat_text(payload)}
    if form == "feishu":
        body: dict = {"msg_type": "text", "content": {"text": chat_text(payload)}}
        if secret:
            seconds = int(now)
            body = {"timestamp": str(seconds), "sign": feishu_sign(secret, seconds), **body}
        return url, body
    body = {"msgtype": "text", "text": {"content": chat_text(payload)}}     # dingtalk and wecom alike
    if form == "dingtalk" and secret:
        millis = int(now * 1000)
        url += ("&" if urlsplit(url).query else "?") + f"timestamp={millis}&sign={dingtalk_sign(secret, millis)}"
    return url, body


def vendor_error(form: str, status: int, answer: bytes) -> Optional[str]:
    """What is wrong with a vendor's answer to a POST (None: the alert was taken)."""
    text = answer.decode("utf-8", errors="replace").strip()
    if form == "slack":
        return None if status == 200 and text == "ok" else f"HTTP {status}: {text}"
    if not 200 <= status < 300:
        return f"HTTP {status}: {text}"
    try:
        said = json.loads(text)
    except ValueError:
        return f"an answer that is not JSON: {text}"
    if not isinstance(said, dict):
        return f"an answer that is not a JSON object: {text}"
    if form == "feishu":     # its documented answer is {"code", "msg"}; older ones said {"StatusCode", "StatusMessage"}
        code_key, words_key = ("StatusCode", "StatusMessage") if "StatusCode" in said else ("code", "msg")
    else:
        code_key, words_key = "errcode", "errmsg"
    code = said.get(code_key, 0)
    return None if code == 0 else f"{code_key} {code}: {said.get(words_key, '')}"


def _read_some(answer: requests.Response, limit: int = ANSWER_LIMIT) -> bytes:
    kept = b""
    for chunk in answer.iter_content(4096):
        kept += chunk
        if len(kept) >= limit:
            break
    return kept[:limit]


class WebhookSender:
    """POSTs alerts to ALERT_WEBHOOK in its format from a thread of its own (started with the first alert)
    through a small queue: `send` never blocks."""

    def __init__(self, url: str, form: Optional[str] = None, secret: Optional[str] = None):
        self.url, self.format, self._secret = url, webhook_format(url, form), secret
        self._queue: queue.Queue = queue.Queue(QUEUE_SIZE)
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._stopping = threading.Event()
        self._said: set = set()       # the errors logged since the last alert taken (each said once)

    def send(self, payload: dict) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = start_thread(self._send_loop, "batchd-alerts")
        try:
            self._queue.put_nowait(payload)
        except queue.Full:
            pass     # only while the webhook fails or hangs, which is logged; the alert's line is in the log

    def close(self, timeout: float = POST_TIMEOUT) -> None:
        """Send what is queued, for at most `timeout` seconds (a last alert before a once-mode exit), then stop."""
        self._stopping.set()
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _send_loop(self) -> None:
        while True:
            check_in(within=IDLE_WAIT + 1)
            try:
                payload = self._queue.get(timeout=IDLE_WAIT)
            except queue.Empty:
                if self._stopping.is_set():
                    return
                continue
            check_in(within=2 * POST_TIMEOUT + 1)    # a connect, then the answer
            self._post(payload)

    def _post(self, payload: dict) -> None:
        url, body = vendor_request(self.format, self.url, self._secret, payload, time.time())
        try:
            # stream: batchd's own webhook is judged by its status alone, its body never read.
            with requests.post(url, json=body, timeout=POST_TIMEOUT, stream=True) as answer:
                if self.format == "json":
                    answer.raise_for_status()
                    error = None
                else:
                    error = vendor_error(self.format, answer.status_code, _read_some(answer))
        except requests.RequestException as e:
            self._failed(type(e).__name__, escape_controls(f"{type(e).__name__}: {self._redacted(str(e), url)}"))
            return
        if error is not None:
            self._failed(error, escape_controls(error[:SHOWN_ANSWER]))
            return
        if self._said:
            log.info("alert webhook %s takes alerts again", webhook_name(self.url))
        self._said.clear()

    def _failed(self, error: str, shown: str) -> None:
        if error in self._said or len(self._said) >= ERRORS_SAID:
            return
        self._said.add(error)
        log.warning("alert webhook %s fails (%s); alerts are still logged, and each next one is tried on it "
                    "again (format %s)", webhook_name(self.url), shown, self.format)

    def _redacted(self, text: str, url: str) -> str:
        """An error's text without the webhook's path and query (requests names the URL it failed on)."""
        parts = urlsplit(url)
        for hidden in (url, parts.path + ("?" + parts.query if parts.query else ""), parts.path):
            if len(hidden) > 1:
                text = text.replace(hidden, "/...")
        return text
