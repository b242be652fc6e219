"""Settings as SPEC Part 3 fixes them: names, BATCHD_* environment, TOML file, precedence."""
import dataclasses
import inspect
import json
import os
import re

import pytest

from batchd import config
from batchd.config import SETTING_TYPES, Settings, load_settings, redact_url, settings_from_plain, settings_table
from batchd.errors import ConfigError
from procs import ROOT

SETTINGS_PAGE = os.path.join(ROOT, "docs", "settings.md")


def write(tmp_path, text, name="batchd.toml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_defaults_are_the_documents():
    s = Settings()
    assert (s.BATCH_INTERVAL, s.BATCH_INTERVAL_UNIT, s.BATCH_MONITOR_INTERVAL, s.BATCH_LOST_TASK_STALE,
            s.BATCH_PUSH_LIMIT, s.BATCH_TASK_ID_FIELD, s.BATCH_TASK_STATE_FIELD, s.BATCH_TASK_TIME_FIELD,
            s.BATCH_TASK_MAX_ATTEMPTS, s.SPIDER_MAX_RETRY_TIMES, s.ITEM_FLUSH_SIZE, s.ITEM_FLUSH_INTERVAL) == \
        (7, "day", 10.0, 600.0, 5000, "id", "batch_status", "update_time", 10, 3, 500, 1.0)


def test_precedence_defaults_spider_file_environment_command_line(tmp_path):
    path = write(tmp_path, "BATCH_INTERVAL = 3\nITEM_FLUSH_SIZE = 30\nSPIDER_THREAD_COUNT = 7\n")
    custom = {"BATCH_INTERVAL": 2, "ITEM_FLUSH_SIZE": 20, "SPIDER_THREAD_COUNT": 6, "BATCH_PUSH_LIMIT": 99}
    environ = {"BATCHD_ITEM_FLUSH_SIZE": "40", "BATCHD_SPIDER_THREAD_COUNT": "8"}
    s = load_settings(custom, config_files=path, environ=environ, overrides={"SPIDER_THREAD_COUNT": 9})
    assert (s.BATCH_PUSH_LIMIT, s.BATCH_INTERVAL, s.ITEM_FLUSH_SIZE, s.SPIDER_THREAD_COUNT) == (99, 3, 40, 9)
    assert s.BATCH_LOST_TASK_STALE == 600.0


def test_the_file_comes_from_batchd_config_and_keys_are_case_insensitive(tmp_path):
    path = write(tmp_path, 'batch_interval_unit = "hour"\nmysql_url = "mysql://u:p@h/db"\n')
    s = load_settings(environ={"BATCHD_CONFIG": path})
    assert (s.BATCH_INTERVAL_UNIT, s.MYSQL_URL) == ("hour", "mysql://u:p@h/db")


def test_with_no_batchd_config_the_working_directorys_batchd_toml_comes_before_the_systems(tmp_path, monkeypatch):
    system = tmp_path / "etc.toml"
    system.write_text("WORKERS = 3\n")
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.setattr(config, "DEFAULT_CONFIG_FILE", str(system))
    monkeypatch.chdir(project)
    assert config.found_config_file({}) == (str(system), "the system's")
    assert load_settings({}, environ={}).WORKERS == 3
    (project / "batchd.toml").write_text("WORKERS = 5\n")
    assert config.found_config_file({}) == (str(project / "batchd.toml"), "./batchd.toml")
    assert load_settings({}, environ={}).WORKERS == 5             # the first found, not both layered
    named = {"BATCHD_CONFIG": str(system)}
    assert config.found_config_file(named) == (str(system), "BATCHD_CONFIG")
    assert load_settings({}, environ=named).WORKERS == 3
    system.unlink()
    (project / "batchd.toml").unlink()
    path, why = config.found_config_file({})
    assert path is None and why.startswith("none: no BATCHD_CONFIG, no ./batchd.toml, no ")


def test_environment_values_are_typed():
    s = load_settings(environ={"BATCHD_BATCH_MONITOR_INTERVAL": "2.5", "BATCHD_REQUEST_FILTER_ENABLE": "yes",
                               "BATCHD_WORKERS": "3", "BATCHD_NAMESPACE": "shop:v2"})
    assert (s.BATCH_MONITOR_INTERVAL, s.REQUEST_FILTER_ENABLE, s.WORKERS, s.NAMESPACE) == (2.5, True, 3, "shop:v2")


@pytest.mark.parametrize("layer, culprit", [
    ({"environ": {"BATCHD_BATCH_INTERVALL": "1"}}, "'BATCHD_BATCH_INTERVALL' in the environment"),
    ({"overrides": {"FLUSH_SIZE": 1}}, "'FLUSH_SIZE' in the command line"),
    ({"custom": {"BATCH_PUSHLIMIT": 1}}, "'BATCH_PUSHLIMIT' in __custom_setting__"),
])
def test_an_unknown_setting_name_is_an_error_naming_it(layer, culprit):
    kwargs = {"environ": {}, **{k: v for k, v in layer.items() if k != "custom"}}
    with pytest.raises(ConfigError, match=culprit):
        load_settings(layer.get("custom"), **kwargs)


def test_an_unknown_key_in_the_file_names_the_file(tmp_path):
    path = write(tmp_path, "BATCH_INTERVALL = 1\n")
    with pytest.raises(ConfigError, match=f"unknown setting 'BATCH_INTERVALL' in {path}"):
        load_settings(config_files=path, environ={})


@pytest.mark.parametrize("environ, message", [
    ({"BATCHD_BATCH_INTERVAL": "seven"}, "BATCH_INTERVAL in the environment: 'seven' is not a valid int"),
    ({"BATCHD_BATCH_INTERVAL_UNIT": "week"}, "BATCH_INTERVAL_UNIT: 'week' is not one of day, hour"),
    ({"BATCHD_BATCH_PUSH_LIMIT": "0"}, "BATCH_PUSH_LIMIT: must be at least 1, got 0"),
    ({"BATCHD_BATCH_PUSH_LIMIT": "1e20"}, "BATCH_PUSH_LIMIT in the environment: '1e20' is not a valid int"),
    ({"BATCHD_BATCH_LOST_TASK_STALE": "nan"}, "BATCH_LOST_TASK_STALE: nan is not a finite number"),
    ({"BATCHD_ITEM_FLUSH_INTERVAL": "inf"}, "ITEM_FLUSH_INTERVAL: inf is not a finite number"),
    ({"BATCHD_REQUEST_TIMEOUT": "NaN"}, "REQUEST_TIMEOUT: nan is not a finite number"),
    ({"BATCHD_BATCH_INTERVAL": "999999999"}, "BATCH_INTERVAL: must be at most 10000, got 999999999"),
    ({"BATCHD_TASK_TIMEOUT": "-1"}, "TASK_TIMEOUT: must be at least 0, got -1.0"),
    ({"BATCHD_SPIDER_MAX_RETRY_TIMES": "-1"}, "SPIDER_MAX_RETRY_TIMES: must be at least 0, got -1"),
    ({"BATCHD_BATCH_TASK_STATE_FIELD": "state; DROP"}, "BATCH_TASK_STATE_FIELD: 'state; DROP' is not a valid"),
    ({"BATCHD_NAMESPACE": "a b"}, "NAMESPACE"),
])
def test_bad_values_name_the_setting(environ, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        load_settings(environ=environ)


@pytest.mark.parametrize("environ, message", [
    ({"BATCHD_BATCH_INTERVAL_UNIT": "Day"}, "setting BATCH_INTERVAL_UNIT: 'Day' is not one of day, hour"),
    ({"BATCHD_LOG_LEVEL": "verbose"}, "setting LOG_LEVEL: 'verbose' is not one of DEBUG, INFO, WARNING, ERROR"),
    ({"BATCHD_NAMESPACE": "a b"}, "setting NAMESPACE: 'a b' may hold only letters, digits and _ . : -"),
    ({"BATCHD_BATCH_TASK_ID_FIELD": "1d"}, "BATCH_TASK_ID_FIELD: '1d' is not a valid table or column name "
                                            "(letters, digits and _, at most 64, not starting with a digit)"),
    ({"BATCHD_WORKERS": "2000"}, "setting WORKERS: must be at most 1024, got 2000"),
])
def test_messages_of_the_declared_checks_are_exact(environ, message):
    with pytest.raises(ConfigError) as error:
        load_settings(environ=environ)
    assert str(error.value) == message


def test_log_level_is_any_case_and_unset_optionals_pass():
    s = load_settings(environ={"BATCHD_LOG_LEVEL": "debug"})
    assert (s.LOG_LEVEL, s.NAMESPACE, s.WORKERS) == ("debug", None, None)


def test_validation_reads_only_the_declarations():
    """No setting is named in the checks: a new setting is checked by what its declaration says."""
    code = inspect.getsource(config.validate) + inspect.getsource(config.check_setting)
    named = [f.name for f in dataclasses.fields(Settings) if re.search(rf"\b{f.name}\b", code)]
    assert named == []


def test_every_number_is_declared_with_bounds_and_every_setting_with_a_meaning():
    for f in dataclasses.fields(Settings):
        declared, (base, optional) = f.metadata, SETTING_TYPES[f.name]
        assert declared["meaning"] and "\n" not in declared["meaning"] and "|" not in declared["meaning"], f.name
        if base in (int, float):
            assert declared["low"] is not None and declared["high"] is not None, f.name
            assert declared["low"] <= (f.default if f.default is not None else declared["low"]) <= declared["high"]
        else:
            assert declared["low"] is None and declared["high"] is None, f.name
        if declared["choices"] or declared["identifier"] or declared["pattern"] is not None:
            assert base is str, f.name
        assert (f.default is None) == optional, f.name   # None is "unset", and only an optional is unset
        assert not declared["default_text"] or f.default is None, f.name
    config.validate(Settings())   # every default passes its own declaration


def settings_page_table() -> str:
    """The rows of the table that follows the "Generated from the declarations" comment in docs/settings.md."""
    with open(SETTINGS_PAGE, encoding="utf-8") as f:
        after = f.read().split("<!-- Generated from the declarations", 1)[1].split("-->", 1)[1]
    rows = after.lstrip("\n").split("\n\n", 1)[0]
    return "".join(line + "\n" for line in rows.splitlines() if line.startswith("|"))


def test_the_settings_pages_table_is_the_declarations():
    """docs/settings.md shows settings_table() verbatim: every setting, its default, values and meaning."""
    page, declared = settings_page_table(), settings_table()
    listed = {re.match(r"\| `(\w+)`", row).group(1) for row in page.splitlines()[2:]}
    names = {f.name for f in dataclasses.fields(Settings)}
    assert {"missing": names - listed, "unknown": listed - names} == {"missing": set(), "unknown": set()}
    assert page == declared, "docs/settings.md's settings table differs from batchd/config.py; paste this in:\n" + declared


def test_numbers_from_a_toml_file_are_held_to_their_bounds_too(tmp_path):
    path = write(tmp_path, "ITEM_FLUSH_INTERVAL = inf\n")
    with pytest.raises(ConfigError, match="ITEM_FLUSH_INTERVAL: inf is not a finite number"):
        load_settings(config_files=path, environ={})
    path = write(tmp_path, "BATCH_PUSH_LIMIT = 1e20\n")
    with pytest.raises(ConfigError, match="BATCH_PUSH_LIMIT: must be at most 1000000, got 100000000000000000000"):
        load_settings(config_files=path, environ={})


def test_a_broken_file_is_one_line_naming_it(tmp_path):
    path = write(tmp_path, "BATCH_INTERVAL = = 3\n")
    with pytest.raises(ConfigError, match=f"config file {path}: invalid TOML"):
        load_settings(config_files=path, environ={})
    with pytest.raises(ConfigError, match="not found"):
        load_settings(config_files=str(tmp_path / "missing.toml"), environ={})


def test_failed_items_path_follows_systemds_state_directory(monkeypatch):
    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/batchd")
    assert Settings().failed_items_path() == "/var/lib/batchd/failed_items.jsonl"
    monkeypatch.delenv("STATE_DIRECTORY")
    assert Settings().failed_items_path() == "./failed_items.jsonl"


def test_passwords_never_reach_a_log_line():
    assert redact_url("mysql://crawler:hunter2@db:3306/crawl") == "mysql://crawler:***@db:3306/crawl"
    assert redact_url("redis://:hunter2@cache:6379/0") == "redis://:***@cache:6379/0"
    assert redact_url("redis://cache:6379/0") == "redis://cache:6379/0"


def test_the_store_is_chosen_by_store_else_mysql_url(tmp_path):
    from batchd import MysqlBatchStore, SqliteBatchStore
    from batchd.backends import open_store as store_from_settings
    sqlite = store_from_settings(Settings(STORE=f"sqlite:///{tmp_path}/t.db", MYSQL_URL="mysql://u@h/db"))
    assert isinstance(sqlite, SqliteBatchStore) and sqlite.describe() == f"SQLite {tmp_path}/t.db"
    assert isinstance(store_from_settings(Settings(MYSQL_URL="mysql://u@h/db")), MysqlBatchStore)
    with pytest.raises(ConfigError, match="no store configured"):
        store_from_settings(Settings())
    with pytest.raises(ConfigError, match=r"setting STORE: 'postgres://u:\*\*\*@h/db' is neither"):
        store_from_settings(Settings(STORE="postgres://u:pw@h/db"))


def test_lists_and_tables_from_a_file_the_environment_and_code(tmp_path):
    path = write(tmp_path, 'USER_AGENT = ["bot/1", "bot/2"]\n[DEFAULT_REQUEST_HEADERS]\nAccept = "text/html"\n')
    from_file = load_settings(config_files=path, environ={})
    assert (from_file.USER_AGENT, from_file.DEFAULT_REQUEST_HEADERS) == (("bot/1", "bot/2"), {"Accept": "text/html"})
    from_environ = load_settings(environ={"BATCHD_USER_AGENT": '["a", "b"]', "BATCHD_DEFAULT_REQUEST_HEADERS": '{"X": "1"}'})
    assert (from_environ.USER_AGENT, from_environ.DEFAULT_REQUEST_HEADERS) == (("a", "b"), {"X": "1"})
    assert load_settings({"USER_AGENT": "one bot/1.0"}, environ={}).USER_AGENT == ("one bot/1.0",)
    with pytest.raises(ConfigError, match=r"USER_AGENT in the environment: '\[\]' is not a text or a non-empty list"):
        load_settings(environ={"BATCHD_USER_AGENT": "[]"})
    with pytest.raises(ConfigError, match="DEFAULT_REQUEST_HEADERS in __custom_setting__: .* is not a table of texts"):
        load_settings({"DEFAULT_REQUEST_HEADERS": {"X": 1}}, environ={})
    with pytest.raises(ConfigError, match=r"unexpected table \[WORKERS\]"):
        load_settings(config_files=write(tmp_path, "[WORKERS]\nx = 1\n", "bad.toml"), environ={})


def test_settings_come_back_whole_from_their_plain_values():
    """The probe sends its settings as JSON, where a list of texts has no tuple to come back as."""
    settings = Settings(USER_AGENT=("a", "b"), DEFAULT_REQUEST_HEADERS={"X": "1"}, WORKERS=3)
    plain = json.loads(json.dumps(dataclasses.asdict(settings)))
    assert settings_from_plain(plain, "the probe's answer") == settings
