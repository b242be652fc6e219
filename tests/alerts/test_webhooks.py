"""Alerts in a team's chat (batchd/alerts/webhooks.py) received on a local webhook (tests/httpserver.py's
/hook): each vendor's text message, its signature recomputed here from the secret, the format chosen from
the webhook's host; a vendor's error answer logged once for two alerts, its words escaped; the secret in
no log line, repr or error; the late alert raised when the batch's rate cannot finish before the next
batch is due, and not when it can."""
import base64
import hashlib
import hmac
import logging
import time
from datetime import datetime, timedelta
from urllib.parse import parse_qs, unquote_plus

import pytest

from batchd.config import Settings, load_settings
from batchd.errors import ConfigError
from batchd.model import Progress
from batchd.alerts.alerts import Alerts
from batchd.alerts.webhooks import webhook_format
from harness import wait_for

SECRET = "SEC7a3f0c9e51d24b8b9c1e0f6a2d4c8e1b3f5a7c9e0d2b4f6a8c0e2d4f6a8b0c2"
DUE = datetime(2026, 12, 8, 0, 0)


def alerts_to(site, form, path=None, **settings):
    """Alerts of namespace "ns" sent to the site's /hook/<form> as `form`, signed with SECRET."""
    url = site.url(path or f"/hook/{form}")
    return Alerts(Settings(ALERT_WEBHOOK=url, ALERT_WEBHOOK_FORMAT=form, ALERT_WEBHOOK_SECRET=SECRET,
                           **settings), "ns")


def received(site, path):
    return wait_for(lambda: site.received(path), message=f"an alert on {path}")


def hmac_sha256(key: str, message: str) -> bytes:
    return hmac.new(key.encode(), message.encode(), hashlib.sha256).digest()


def webhook_lines(caplog):
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("alert webhook ")]


# -- the formats, as each vendor documents its text message

def test_dingtalk_gets_a_text_message_signed_in_its_query(site, caplog):
    alerts = alerts_to(site, "dingtalk", "/hook/dingtalk?access_token=robot-token")
    with caplog.at_level(logging.DEBUG, logger="batchd"):
        before = int(time.time() * 1000)
        alerts.overdue(3, DUE)
        body, = received(site, "/hook/dingtalk")
        alerts.close()
    assert body == {"msgtype": "text", "text": {"content": "batchd ns@" + alerts.host + " ALERT overdue: batch 3 is "
                                                           "overdue: the next was due at 2026-12-08 00:00:00, it "
                                                           "opens once this one finishes"}}
    query, = site.received_queries("/hook/dingtalk")
    fields = parse_qs(query)                       # parse_qs decodes the URL-encoding of the sign
    assert sorted(fields) == ["access_token", "sign", "timestamp"] and fields["access_token"] == ["robot-token"]
    timestamp, = fields["timestamp"]
    assert before <= int(timestamp) <= time.time() * 1000            # milliseconds, taken when it was sent
    expected = base64.b64encode(hmac_sha256(SECRET, f"{timestamp}\n{SECRET}")).decode()
    assert fields["sign"] == [expected]
    raw_sign = query.split("sign=")[1].split("&")[0]
    assert not set(raw_sign) & set("+/=") and unquote_plus(raw_sign) == expected     # URL-encoded base64
    assert SECRET not in caplog.text


def test_feishu_gets_a_text_message_signed_in_its_body(site, caplog):
    alerts = alerts_to(site, "feishu")
    with caplog.at_level(logging.DEBUG, logger="batchd"):
        before = int(time.time())
        alerts.check_failures(4, done=10, failed=30)
        body, = received(site, "/hook/feishu")
        alerts.close()
    assert sorted(body) == ["content", "msg_type", "sign", "timestamp"] and body["msg_type"] == "text"
    assert body["content"] == {"text": f"batchd ns@{alerts.host} ALERT failures: batch 4: 30 of 40 settled tasks "
                                       "failed (75%, above FAILURE_ALERT_RATIO=0.2)"}
    assert isinstance(body["timestamp"], str) and before <= int(body["timestamp"]) <= time.time()   # seconds
    # Feishu's recipe: the key is "timestamp\nsecret", the message is empty.
    assert body["sign"] == base64.b64encode(hmac_sha256(f"{body['timestamp']}\n{SECRET}", "")).decode()
    assert site.received_queries("/hook/feishu") == [""]
    assert SECRET not in caplog.text


def test_a_signature_from_another_secret_does_not_pass(site):
    """The checks above recompute the signature from SECRET: one made with any other secret differs."""
    alerts = Alerts(Settings(ALERT_WEBHOOK=site.url("/hook/feishu"), ALERT_WEBHOOK_FORMAT="feishu",
                             ALERT_WEBHOOK_SECRET=SECRET + "x"), "ns")
    alerts.overdue(1, DUE)
    body, = received(site, "/hook/feishu")
    alerts.close()
    assert body["sign"] != base64.b64encode(hmac_sha256(f"{body['timestamp']}\n{SECRET}", "")).decode()


@pytest.mark.parametrize("form, shape", [
    ("wecom", lambda text: {"msgtype": "text", "text": {"content": text}}),
    ("slack", lambda text: {"text": text}),
])
def test_wecom_and_slack_get_their_text_message_unsigned(site, form, shape):
    site.hook_answers[f"/hook/{form}"] = ((200, b"ok", "text/plain") if form == "slack" else
                                          (200, b'{"errcode":0,"errmsg":"ok"}', "application/json"))
    alerts = alerts_to(site, form)
    alerts.overdue(2, DUE)
    body, = received(site, f"/hook/{form}")
    alerts.close()
    assert body == shape(f"batchd ns@{alerts.host} ALERT overdue: batch 2 is overdue: the next was due at "
                         "2026-12-08 00:00:00, it opens once this one finishes")
    assert site.received_queries(f"/hook/{form}") == [""]


def test_json_stays_batchds_own_payload(site):
    alerts = alerts_to(site, "json")
    alerts.overdue(2, DUE)
    body, = received(site, "/hook/json")
    alerts.close()
    assert sorted(body) == ["batch", "due", "host", "kind", "message", "namespace", "time"]
    assert (body["kind"], body["batch"], body["due"]) == ("overdue", 2, "2026-12-08 00:00:00")


@pytest.mark.parametrize("url, form", [
    ("https://oapi.dingtalk.com/robot/send?access_token=abc", "dingtalk"),
    ("https://OAPI.DingTalk.com/robot/send?access_token=abc", "dingtalk"),
    ("https://open.feishu.cn/open-apis/bot/v2/hook/0a1b", "feishu"),
    ("https://open.larksuite.com/open-apis/bot/v2/hook/0a1b", "feishu"),
    ("https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=0a1b", "wecom"),
    ("https://hooks.slack.com/services/T000/B000/XXXX", "slack"),
    ("https://alerts.example.com/batchd", "json"),
    ("https://oapi.dingtalk.com.example.com/robot/send", "json"),
    ("http://127.0.0.1:8080/hook", "json"),
])
def test_the_webhooks_host_chooses_the_format(url, form):
    assert webhook_format(url) == form
    assert webhook_format(url, "slack") == "slack"              # ALERT_WEBHOOK_FORMAT, when set, wins


def test_the_format_must_be_one_of_the_five():
    with pytest.raises(ConfigError, match="setting ALERT_WEBHOOK_FORMAT: 'teams' is not one of json, dingtalk"):
        load_settings(overrides={"ALERT_WEBHOOK_FORMAT": "teams"}, environ={})


def test_the_secret_is_in_no_repr_and_no_error():
    settings = load_settings(environ={"BATCHD_ALERT_WEBHOOK_SECRET": SECRET}, config_files=[])
    assert settings.ALERT_WEBHOOK_SECRET == SECRET and SECRET not in repr(settings)
    with pytest.raises(ConfigError) as refused:
        load_settings(overrides={"ALERT_WEBHOOK_SECRET": 12345678}, environ={})
    assert "12345678" not in str(refused.value) and "***" in str(refused.value)


# -- a vendor's answer that says no

@pytest.mark.parametrize("form, status, answer, said", [
    ("dingtalk", 200, b'{"errcode":310000,"errmsg":"sign not match\\u001b[2J\\nforged line"}',
     "errcode 310000: sign not match\\x1b[2J\\nforged line"),
    ("feishu", 200, b'{"code":19021,"msg":"sign match fail or timestamp is not within one hour from current '
                    b'time","data":{}}',
     "code 19021: sign match fail or timestamp is not within one hour from current time"),
    ("wecom", 200, b'{"errcode":93000,"errmsg":"invalid webhook url"}', "errcode 93000: invalid webhook url"),
    ("slack", 400, b"invalid_payload", "HTTP 400: invalid_payload"),
    ("slack", 200, b"something else", "HTTP 200: something else"),
])
def test_a_vendors_error_answer_is_logged_once_for_two_alerts(site, caplog, form, status, answer, said):
    path = f"/hook/{form}"
    site.hook_answers[path] = (status, answer, "application/json" if answer.startswith(b"{") else "text/plain")
    alerts = alerts_to(site, form, ALERT_REPEAT_SECONDS=0)
    with caplog.at_level(logging.INFO, logger="batchd"):
        alerts.overdue(1, DUE)
        alerts.overdue(1, DUE)
        wait_for(lambda: len(site.received(path)) == 2, message="both alerts POSTed")
        site.hook_answers[path] = ((200, b"ok", "text/plain") if form == "slack" else
                                   (200, b'{"errcode":0,"errmsg":"ok","code":0,"msg":"success"}', "application/json"))
        alerts.overdue(1, DUE)
        alerts.close()
    lines = webhook_lines(caplog)
    assert lines == [f"alert webhook {site.url('/')}... fails ({said}); alerts are still logged, and each next one "
                     f"is tried on it again (format {form})",
                     f"alert webhook {site.url('/')}... takes alerts again"]
    assert all("\n" not in line and "\x1b" not in line for line in lines)
    assert [r.levelname for r in caplog.records if r.getMessage() in lines] == ["WARNING", "INFO"]


def test_two_distinct_errors_are_each_logged_once(site, caplog):
    path = "/hook/dingtalk"
    alerts = alerts_to(site, "dingtalk", ALERT_REPEAT_SECONDS=0)
    with caplog.at_level(logging.WARNING, logger="batchd"):
        for code in (310000, 310000, 130101, 130101):
            site.hook_answers[path] = (200, b'{"errcode":%d,"errmsg":"no"}' % code, "application/json")
            count = len(site.received(path))
            alerts.overdue(1, DUE)
            wait_for(lambda: len(site.received(path)) == count + 1, message="the alert POSTed")
        alerts.close()
    assert [line.split("(")[1].split(")")[0] for line in webhook_lines(caplog)] == ["errcode 310000: no",
                                                                                  "errcode 130101: no"]


# -- the late alert

def late_lines(caplog):
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("ALERT late: ")]


def test_a_batch_whose_rate_cannot_finish_before_the_next_is_due_raises_late_once(site, caplog):
    alerts = Alerts(Settings(ALERT_WEBHOOK=site.url("/hook"), ALERT_WEBHOOK_FORMAT="json"), "ns")
    now = DUE - timedelta(hours=2)
    progress = Progress(total=10_000, done=2_000, failed=0, pending=7_900, processing=100)
    with caplog.at_level(logging.WARNING, logger="batchd"):
        alerts.progress_checked(5, progress, paused=False, rate=2.0, now=now, due=DUE)    # 8000 left: 4000 s
        assert late_lines(caplog) == []                                                   # before the due time
        alerts.progress_checked(5, progress, paused=True, rate=0.5, now=now, due=DUE)     # paused: not judged
        alerts.progress_checked(5, progress, paused=False, rate=0.0, now=now, due=DUE)    # no rate: a stall's
        alerts.progress_checked(5, progress, paused=False, rate=0.5, now=DUE, due=DUE)    # due: overdue's
        assert late_lines(caplog) == []
        alerts.progress_checked(5, progress, paused=False, rate=0.5, now=now, due=DUE)    # 16000 s: 4h26m
        alerts.progress_checked(5, progress, paused=False, rate=0.4, now=now, due=DUE)    # said once a batch
        late, = wait_for(lambda: site.received(), message="the late alert on the webhook")
        alerts.close()
    assert late_lines(caplog) == ["ALERT late: batch 5 will not finish before the next is due: 8000 tasks left at "
                                  "0.5 tasks/s settle at about 2026-12-08 02:26, the next batch is due at "
                                  "2026-12-08 00:00"]
    assert (late["kind"], late["batch"], late["left"], late["rate"]) == ("late", 5, 8000, 0.5)
    assert (late["eta"], late["due"]) == ("2026-12-08 02:26:40", "2026-12-08 00:00:00")


@pytest.mark.parametrize("repeat, said", [(3600, [1, 2]), (0, [1, 1, 2])])
def test_the_late_alert_repeats_as_the_others_do(caplog, repeat, said):
    alerts = Alerts(Settings(ALERT_REPEAT_SECONDS=repeat), "ns")
    progress = Progress(total=100, done=0, failed=0, pending=100, processing=0)
    with caplog.at_level(logging.WARNING, logger="batchd"):
        for batch_id in (1, 1, 2):
            alerts.check_late(batch_id, progress, rate=0.001, now=DUE - timedelta(hours=1), due=DUE)
    assert [int(line.split()[3]) for line in late_lines(caplog)] == said
