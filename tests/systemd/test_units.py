"""The files batchd ships for a Linux service: the systemd units and /etc/batchd.

No systemd needs to run here: `systemd-analyze` checks units offline. The units are also
verified again, installed, inside a real systemd by tests/debian/test_package.py.
"""
import dataclasses
import importlib.util
import os
import re
import subprocess
import sys
import tomllib

import pytest

import batchd
from batchd.cli.arguments import config_files
from batchd.cli.main import VERBS, build_parser
from batchd.config import Settings, declared_default, load_settings
from batchd.errors import ExitCode
from batchd.supervisor.supervisor import KILL_GRACE
from procs import ROOT

UNITS = os.path.join(ROOT, "systemd")
MASTER = os.path.join(UNITS, "batchd-master.service")
MASTER_OF = os.path.join(UNITS, "batchd-master@.service")     # one spider's master, of several on a host
WORKER = os.path.join(UNITS, "batchd-worker@.service")
ALL_UNITS = {"master": MASTER, "master@": MASTER_OF, "worker": WORKER}
CONFIG = os.path.join(ROOT, "etc", "batchd", "batchd.toml")
EXAMPLE_SPIDER = os.path.join(ROOT, "etc", "batchd", "spiders", "example.py")

# What systemd-analyze is given: the master, and an instance of each template (that is what
# runs, with %i expanded).
VERIFIED = {"master": MASTER, "master@": os.path.join(UNITS, "batchd-master@news.service"),
            "worker": os.path.join(UNITS, "batchd-worker@7.service")}


def analyze_verify(unit_path, tmp_path):
    """`systemd-analyze verify` as it would run once the package is installed.

    verify also checks that ExecStart= names an executable, and /usr/bin/batchd exists only
    where the package is installed: a private mount namespace lays a stand-in over /usr/bin
    for this one command. --man=no: the batchd(1) page named by Documentation= comes with the
    package too (tests/debian/test_package.py verifies the installed units with man pages checked).
    """
    stand_in = tmp_path / "bin"
    stand_in.mkdir()
    (stand_in / "batchd").write_text("#!/bin/sh\n")
    (stand_in / "batchd").chmod(0o755)
    script = ('mount -t overlay batchd-verify -o lowerdir="$1":/usr/bin /usr/bin && '
              'exec systemd-analyze verify --man=no "$2"')
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                           "sh", str(stand_in), unit_path],
                          capture_output=True, text=True, timeout=60)


def unit_settings(path) -> dict:
    """{(section, key): [values]} of a unit file; a key given twice keeps both values."""
    found, section = {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("["):
                section = line.strip("[]")
                continue
            key, value = line.split("=", 1)
            found.setdefault((section, key), []).append(value)
    return found


def seconds(value: str) -> float:
    units = {"ms": 0.001, "s": 1, "min": 60, "": 1}
    total = 0.0
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)\s*(ms|s|min|)", value):
        total += float(number) * units[unit]
    return total


@pytest.mark.parametrize("role", sorted(VERIFIED))
def test_systemd_analyze_verify_says_nothing(role, tmp_path):
    result = analyze_verify(VERIFIED[role], tmp_path)
    assert (result.returncode, result.stderr, result.stdout) == (0, "", "")


def test_verify_catches_a_bad_key(tmp_path):
    """The check above can fail: verify exits 0 on an unknown key, but it says so on stderr."""
    bad = tmp_path / "units" / "batchd-master.service"
    bad.parent.mkdir()
    with open(MASTER, encoding="utf-8") as f:
        bad.write_text(f.read().replace("[Service]\n", "[Service]\nWatchdogSecs=10\n"))
    result = analyze_verify(str(bad), tmp_path)
    assert "WatchdogSecs" in result.stderr


@pytest.mark.parametrize("path", ALL_UNITS.values(), ids=ALL_UNITS.keys())
def test_security_exposure_below_3(path):
    result = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager", path],
                            capture_output=True, text=True, timeout=60)
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout)
    assert found, result.stdout + result.stderr
    assert float(found.group(1)) < 3.0, result.stdout


@pytest.mark.parametrize("path", ALL_UNITS.values(), ids=ALL_UNITS.keys())
def test_unit_runs_a_supervised_notify_service(path):
    unit = unit_settings(path)

    def one(key):
        values = unit[("Service", key)]
        assert len(values) == 1, (key, values)
        return values[0]

    assert one("Type") == "notify"
    assert one("NotifyAccess") == "main"   # only the supervisor speaks to systemd
    assert one("Restart") == "on-failure"
    assert one("RestartPreventExitStatus") == str(int(ExitCode.CONFIG))
    assert one("KillMode") == "mixed"
    assert (one("User"), one("Group")) == ("batchd", "batchd")
    assert one("StateDirectory") == "batchd"
    assert one("ConfigurationDirectory") == "batchd"
    # The documented rules (batchd.toml): a child is replaced well before systemd gives up
    # on the supervisor, and a warm stop ends before systemd kills what is left.
    assert seconds(one("WatchdogSec")) >= 2 * (Settings.CHILD_TIMEOUT + KILL_GRACE)
    assert seconds(one("TimeoutStopSec")) > Settings.STOP_TIMEOUT
    assert one("RestrictAddressFamilies").split() == ["AF_UNIX", "AF_INET", "AF_INET6"]
    assert unit[("Service", "SystemCallFilter")][0] == "@system-service"
    for key in ("NoNewPrivileges", "ProtectHome", "PrivateTmp", "PrivateDevices", "ProtectKernelTunables",
                "ProtectKernelModules", "ProtectControlGroups"):
        assert one(key) == "yes", key
    assert one("ProtectSystem") == "strict"
    assert unit[("Install", "WantedBy")] == ["multi-user.target"]


def test_instance_name_reaches_the_supervisor():
    assert unit_settings(WORKER)[("Service", "ExecStart")] == ["/usr/bin/batchd worker --instance %i"]
    assert unit_settings(MASTER_OF)[("Service", "ExecStart")] == ["/usr/bin/batchd master --instance %i"]
    assert unit_settings(MASTER)[("Service", "ExecStart")] == ["/usr/bin/batchd master"]


def command_of(unit: dict, key: str, instance: str) -> list:
    """The arguments of ExecStart= or ExecReload= after /usr/bin/batchd, with %i and $MAINPID filled in."""
    (line,) = unit[("Service", key)]
    program, *arguments = line.replace("%i", instance).replace("$MAINPID", "1").split()
    assert program == "/usr/bin/batchd"
    return arguments


@pytest.mark.parametrize("path", ALL_UNITS.values(), ids=ALL_UNITS.keys())
def test_reload_checks_the_config_the_supervisor_reads(path, tmp_path):
    """`batchd reload` resolves the config files as the supervisor does (worker@NAME: worker-NAME.toml,
    master@NAME: master-NAME.toml) and signals $MAINPID only if they load; a plain kill -HUP would not
    fail a reload."""
    main = tmp_path / "batchd.toml"
    for name in ("batchd.toml", "worker-news.toml", "master-news.toml"):
        (tmp_path / name).write_text("")
    unit = unit_settings(path)
    parser = build_parser()
    start = parser.parse_args(command_of(unit, "ExecStart", "news") + ["--config", str(main)])
    reload = parser.parse_args(command_of(unit, "ExecReload", "news") + ["--config", str(main)])
    assert reload.verb == "reload" and reload.pid == 1
    started_with = config_files(start, role=start.verb)
    assert config_files(reload, role=reload.role) == started_with
    assert len(started_with) == (1 if path == MASTER else 2)
    # The reload runs in a user namespace of its own: with PrivateUsers=yes, ProtectProc=invisible
    # would hide the main process from it and every reload would fail (69).
    assert (unit[("Service", "PrivateUsers")], unit[("Service", "ProtectProc")]) == (["no"], ["invisible"])


def test_the_units_run_the_same_way():
    """The units differ only in what they start (and reload); hardening and timings must not drift apart."""
    def service(path):
        unit = unit_settings(path)
        return {k: v for k, v in unit.items() if k[0] != "Unit" and k not in (("Service", "ExecStart"),
                                                                             ("Service", "ExecReload"))}
    assert service(MASTER) == service(MASTER_OF) == service(WORKER)


WEB = os.path.join(UNITS, "batchd-web.service")
HARDENING = ("NoNewPrivileges", "CapabilityBoundingSet", "AmbientCapabilities", "ProtectSystem", "ProtectHome",
             "PrivateTmp", "PrivateDevices", "PrivateIPC", "PrivateMounts", "ProtectKernelTunables",
             "ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups", "ProtectClock", "ProtectHostname",
             "ProtectProc", "ProcSubset", "RestrictAddressFamilies", "RestrictNamespaces", "RestrictRealtime",
             "RestrictSUIDSGID", "RemoveIPC", "LockPersonality", "MemoryDenyWriteExecute", "SystemCallArchitectures",
             "SystemCallFilter", "SystemCallErrorNumber")


def test_the_dashboards_unit_is_hardened_like_the_others(tmp_path):
    """batchd-web.service: verified, the same sandbox as the master's (and a user namespace of its own, having no
    reload), run as batchd, a notify service that a configuration error does not restart."""
    result = analyze_verify(WEB, tmp_path)
    assert (result.returncode, result.stderr, result.stdout) == (0, "", "")
    web, master = unit_settings(WEB), unit_settings(MASTER)
    assert {key: web[("Service", key)] for key in HARDENING} == {key: master[("Service", key)] for key in HARDENING}
    assert web[("Service", "PrivateUsers")] == ["yes"]
    assert web[("Service", "ExecStart")] == ["/usr/bin/batchd web"]
    for key in ("Type", "NotifyAccess", "User", "Group", "Restart", "RestartPreventExitStatus"):
        assert web[("Service", key)] == master[("Service", key)], key
    security = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager", WEB],
                              capture_output=True, text=True, timeout=60)
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", security.stdout)
    assert found and float(found.group(1)) < 3.0, security.stdout


def commented_settings() -> str:
    """The `# NAME = value` lines of batchd.toml, uncommented: a TOML document."""
    with open(CONFIG, encoding="utf-8") as f:
        return "".join(m.group(1) for m in map(re.compile(r"^# ?([A-Z_]+ = .*\n)$").match, f) if m)


def test_default_config_lists_every_setting_with_its_default():
    listed = tomllib.loads(commented_settings())
    fields = {f.name: declared_default(f) for f in dataclasses.fields(Settings)}
    assert sorted(listed) == sorted(fields)
    for name, default in fields.items():
        if default is not None:   # settings without a default show an example instead
            value = tuple(listed[name]) if isinstance(listed[name], list) else listed[name]   # as settings read it
            assert (value, type(value)) == (default, type(default)), name


def commented_paragraphs() -> dict:
    """Each setting of batchd.toml and the words of its paragraph (the comment lines above it)."""
    setting_line = re.compile(r"^# ?([A-Z_]+) = ")
    with open(CONFIG, encoding="utf-8") as f:
        paragraphs = [p.splitlines() for p in f.read().split("\n\n")]
    return {m.group(1): " ".join(line.lstrip("# ") for line in lines if not setting_line.match(line))
            for lines in paragraphs for m in map(setting_line.match, lines) if m}


def test_default_config_explains_every_setting_and_names_its_choices():
    """The comments are the operator's guide, written by hand and longer than the declared one-line
    meanings (docs/settings.md's table shows those): every setting has some, and they name every choice."""
    words = commented_paragraphs()
    for f in dataclasses.fields(Settings):
        assert words[f.name].strip(), f"{f.name} has no comment above it in batchd.toml"
        for choice in f.metadata["choices"]:
            assert choice in words[f.name], f"batchd.toml does not name {f.name}'s choice {choice}"


def test_default_config_loads_to_the_defaults():
    assert load_settings(config_files=CONFIG, environ={}) == Settings()


def test_every_example_in_the_default_config_is_valid(tmp_path):
    uncommented = tmp_path / "batchd.toml"
    uncommented.write_text(commented_settings())
    settings = load_settings(config_files=str(uncommented), environ={})
    assert settings.SPIDER == "/etc/batchd/spiders/example.py:ExampleSpider"
    assert settings.MYSQL_URL.startswith("mysql://") and settings.REDIS_URL.startswith("redis://")


def test_example_spider_crawls_a_batch(site, tmp_path):
    spec = importlib.util.spec_from_file_location("batchd_example_spider", EXAMPLE_SPIDER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    store = batchd.MemoryBatchStore([{"id": n, "url": site.url(f"/page/{n}")} for n in range(1, 6)])
    module.ExampleSpider(batch_store=store, settings={
        "FAILED_ITEMS_PATH": str(tmp_path / "failed_items.jsonl"),
        "BATCH_MONITOR_INTERVAL": 0.2, "ITEM_FLUSH_INTERVAL": 0.1}).start_monitor(once=True)
    assert [row["batch_status"] for row in store.rows] == [batchd.TaskState.DONE] * 5
    assert sorted((item["title"], item["headings"]) for item in store.items) == \
        sorted((f"Page {n}", [f"Title {n}"]) for n in range(1, 6))


MAN_PAGE = os.path.join(ROOT, "debian", "batchd.1")


@pytest.mark.parametrize("verb", sorted(set(VERBS) - {"tasks"}) + ["tasks add", "tasks import", "tasks import-sitemap"])
def test_man_page_names_every_option(verb):
    """batchd(1) is written by hand: it must keep up with the command's verbs and options."""
    usage = subprocess.run([sys.executable, "-m", "batchd", *verb.split(), "--help"], capture_output=True, text=True,
                           env={**os.environ, "COLUMNS": "200"}, check=True).stdout
    with open(MAN_PAGE, encoding="utf-8") as f:
        page = f.read().replace("\\-", "-")
    options = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", usage)) - {"--help"}
    assert options and {o for o in options if o not in page} == set()
    assert f".B {verb.split()[0]}" in page or f".B batchd {verb.split()[0]}" in page


def test_man_page_says_each_verbs_summary_as_its_help_does_and_renders_without_warnings():
    """batchd(1) and `batchd VERB --help` come from one source: each COMMANDS entry opens with the verb's argparse
    summary, as a sentence; the old `--spider` of `tasks` is named nowhere; groff and man do not complain."""
    from batchd.cli.project import TASKS
    summaries = {**{name: entry.help for name, entry in VERBS.items()},
                 **{f"tasks {entry.name}": entry.help for entry in TASKS}}
    with open(MAN_PAGE, encoding="utf-8") as f:
        page = f.read()
    commands = page.split(".SH COMMANDS\n")[1].split("\n.SH ")[0]
    entries = re.findall(r"^\.TP\n\.B ((?:tasks )?[a-z\\-]+)(?: \\-\\-[a-z]+)?\n(.+)$", commands, re.MULTILINE)
    found = {name.replace("\\-", "-"): line.replace("\\-", "-") for name, line in entries}
    assert len(entries) == len(found) == len(summaries), [name for name, _ in entries]
    assert found == {name: summary[0].upper() + summary[1:] + "." for name, summary in summaries.items()}
    assert "\\-\\-spider" not in page
    groff = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", MAN_PAGE], capture_output=True, text=True)
    assert (groff.returncode, groff.stderr) == (0, "")
    man = subprocess.run(["man", "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z", MAN_PAGE], capture_output=True,
                         text=True, env={**os.environ, "MANWIDTH": "80", "LC_ALL": "C.UTF-8"})
    assert (man.returncode, man.stderr) == (0, "")


def test_settings_man_page_has_an_entry_per_setting_and_renders_without_warnings(tmp_path):
    """batchd.toml(5) as debian/rules writes it (`python3 -m batchd.cli.manpage`): every declared setting
    with its default and values, the files and the environment, and neither groff nor man complains."""
    page = subprocess.run([sys.executable, "-m", "batchd.cli.manpage"], capture_output=True, text=True, check=True,
                          env={**os.environ, "SOURCE_DATE_EPOCH": "1796299200"}).stdout
    assert page.startswith('.TH BATCHD.TOML 5 "2026-12-03" "batchd ')
    sections = re.findall(r"^\.SH (.+)$", page, re.MULTILINE)
    assert sections == ["NAME", "SYNOPSIS", "DESCRIPTION", "SETTINGS", "FILES", "SEE ALSO"]
    entries = re.findall(r"^\.TP\n\.B ([A-Z_]+)\n", page.split(".SH SETTINGS")[1].split(".SH FILES")[0], re.MULTILINE)
    assert entries == [f.name for f in dataclasses.fields(Settings)]
    for file in (r"/etc/batchd/batchd.toml", r"/etc/batchd/worker\- NAME .toml", r"/etc/batchd/master\- NAME .toml"):
        assert page.count(file) >= 2, file           # in the synopsis and under FILES
    assert ".BI BATCHD_ NAME = value" in page and ".BR batchd (1)," in page
    path = tmp_path / "batchd.toml.5"
    path.write_text(page)
    groff = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", str(path)], capture_output=True, text=True)
    assert (groff.returncode, groff.stderr) == (0, "")
    # As lintian reads a page: man's own warnings, at 80 columns.
    man = subprocess.run(["man", "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z", str(path)], capture_output=True,
                         text=True, env={**os.environ, "MANWIDTH": "80", "LC_ALL": "C.UTF-8"})
    assert (man.returncode, man.stderr) == (0, "")
    rendered = subprocess.run(["man", "-l", str(path)], capture_output=True, text=True, check=True,
                              env={**os.environ, "MANWIDTH": "80", "LC_ALL": "C.UTF-8", "MAN_KEEP_FORMATTING": ""})
    assert "DOWNLOAD_TIMEOUT" in rendered.stdout and "Default: 180.0. Values: 0.1 to 86400.0." in rendered.stdout
