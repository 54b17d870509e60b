"""deploy/ as shipped: Alertmanager, Prometheus, the systemd unit and the cron line pass their own tools' checks,
every shipped rule routes to the doctor, and the pieces agree on ports, paths and users."""

from __future__ import annotations

import configparser
import fcntl
import json
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from doctor.diagnose import build_parser, parse_options
from doctor.durations import parse_duration
from doctor.remedy.escalate import Escalation
from playbooks.registry import PLAYBOOK_MODULES
from tests.http_capture import receiver

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
AM = DEPLOY / "alertmanager" / "alertmanager.yml"
PROM = DEPLOY / "prometheus" / "prometheus.yml"
RULES = DEPLOY / "prometheus" / "rules.yml"
UNIT = DEPLOY / "systemd" / "serving-doctor.service"
CRON = DEPLOY / "cron" / "serving-doctor"
EXAMPLE = ROOT / "examples" / "doctor.toml"
STATE_DIR = "/var/lib/serving-doctor"
CONFIG = "/etc/serving-doctor/doctor.toml"
WEBHOOK = "http://127.0.0.1:9361/v1/alerts"
DOCTOR_RECEIVER = "serving-doctor"


def _tool(name: str, package: str) -> str:
    path = shutil.which(name) or next((p for p in (f"/usr/bin/{name}", f"/usr/sbin/{name}") if Path(p).exists()),
                                      None)
    if path is None:
        pytest.fail(f"{name} is not installed: run `make test` (scripts/ensure-debian-packages.sh installs Debian's "
                    f"{package} package)")
    return path


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=60, cwd=cwd)


def shipped_alerts() -> list[dict[str, str]]:
    """Each alerting rule in rules.yml: its name and its labels (severity, playbook)."""
    out = []
    for block in re.split(r"^ {6}- alert: ", RULES.read_text(), flags=re.M)[1:]:
        name, rest = block.split("\n", 1)
        labels = dict(re.findall(r"^ {10}(\w+): (\S+)$", rest.split("annotations:")[0], re.M))
        out.append({"alertname": name.strip(), **labels})
    return out


# ---------------------------------------------------------------- Alertmanager


@pytest.fixture(scope="module")
def amtool() -> str:
    return _tool("amtool", "prometheus-alertmanager")


def _routes(amtool: str, labels: dict[str, str], config: Path = AM) -> str:
    result = _run(amtool, "config", "routes", "test", f"--config.file={config}",
                  *[f"{k}={v}" for k, v in sorted(labels.items())])
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.strip()


def test_amtool_checks_the_alertmanager_config(amtool: str) -> None:
    result = _run(amtool, "check-config", str(AM))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout and "2 receivers" in result.stdout and "1 inhibit rules" in result.stdout


def test_amtool_catches_a_broken_copy(amtool: str, tmp_path: Path) -> None:
    """The check is live: a field Alertmanager does not know fails it."""
    bad = tmp_path / "alertmanager.yml"
    bad.write_text(AM.read_text().replace("max_alerts: 20", "max_alerts: 20\n        bogus_field: 1"))
    assert _run(amtool, "check-config", str(bad)).returncode != 0


def test_every_shipped_rule_routes_to_the_doctor(amtool: str) -> None:
    alerts = shipped_alerts()
    assert len(alerts) == RULES.read_text().count("- alert: ") and len(alerts) >= 10
    for alert in alerts:
        assert alert.get("playbook") in PLAYBOOK_MODULES, alert
        job = "router" if "router" in alert["alertname"].lower() else "vllm"
        labels = {**alert, "job": job, "instance": "127.0.0.1:8001"}
        assert _routes(amtool, labels) == DOCTOR_RECEIVER, f"{alert['alertname']} goes elsewhere"
    # playbooks without a rule in the default file get one with other options (doctor rules --slo ...)
    for playbook in PLAYBOOK_MODULES:
        assert _routes(amtool, {"alertname": "AnyRule", "playbook": playbook}) == DOCTOR_RECEIVER


def test_everything_else_and_the_doctors_escalations_go_to_people(amtool: str) -> None:
    assert _routes(amtool, {"alertname": "NodeDiskFull", "instance": "10.0.0.1:9100"}) == "default"
    assert _routes(amtool, {"alertname": "VllmKvCachePressure", "playbook": ""}) == "default"
    escalation = Escalation("fix did not hold", engine="hot", playbook="kv_pressure", action="shrink_batch")
    assert escalation.labels()["playbook"] == "kv_pressure"  # why the route must look at source first
    assert _routes(amtool, escalation.labels()) == "default", "the doctor's escalation would loop back to it"


def test_doctor_route_groups_and_webhook_settings() -> None:
    text = AM.read_text()
    route = text[text.index("receiver: serving-doctor"):text.index("inhibit_rules:")]
    assert "group_by: [alertname, playbook, instance]" in route
    for key in ("group_wait", "group_interval", "repeat_interval"):
        assert re.search(rf"^ +{key}: \d+[smh]$", route, re.M), key
    hook = text[text.index("webhook_configs:"):]
    assert f"url: {WEBHOOK}" in hook and "send_resolved: true" in hook and re.search(r"max_alerts: [1-9]\d*", hook)
    assert "type: Bearer" in hook and "credentials_file: /" in hook and "credentials:" not in hook.replace(
        "credentials_file", "")


def test_alertmanager_sends_the_bearer_token_from_the_file(tmp_path: Path) -> None:
    """Real Alertmanager on loopback: an alert with a playbook label reaches the webhook, token from the file."""
    binary = _tool("prometheus-alertmanager", "prometheus-alertmanager")
    (tmp_path / "token").write_text("t0ken-from-file\n")
    with receiver() as rec:
        text = AM.read_text()
        for old, new in ((WEBHOOK, rec.url + "/v1/alerts"), ("/etc/prometheus/serving-doctor-token",
                                                             str(tmp_path / "token")),
                         ("group_wait: 10s", "group_wait: 1s")):
            assert text.count(old) == 1, old
            text = text.replace(old, new)
        (tmp_path / "am.yml").write_text(text)
        port = _free_port()
        proc = subprocess.Popen([binary, f"--config.file={tmp_path / 'am.yml'}", f"--storage.path={tmp_path / 'data'}",
                                 f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=",
                                 f"--web.external-url=http://127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            base = f"http://127.0.0.1:{port}"
            _wait_ready(base + "/-/ready", proc)
            alerts = [{"labels": {"alertname": "VllmKvCachePressure", "playbook": "kv_pressure", "severity": "warning",
                                  "job": "vllm", "instance": inst}} for inst in ("127.0.0.1:8001", "127.0.0.1:8002")]
            alerts.append({"labels": {"alertname": "NodeDiskFull", "instance": "127.0.0.1:9100"}})
            r = httpx.post(base + "/api/v2/alerts", json=alerts, trust_env=False, timeout=10)
            assert r.status_code == 200, r.text
            posts = rec.wait_for(2, timeout_s=60)
        finally:
            proc.terminate()
            proc.wait(10)
    for post in posts:
        assert post.path == "/v1/alerts" and post.headers["authorization"] == "Bearer t0ken-from-file"
        body = post.json()
        assert body["version"] == "4" and body["receiver"] == "serving-doctor" and body["status"] == "firing"
        assert set(body["groupLabels"]) == {"alertname", "playbook", "instance"} and len(body["alerts"]) == 1
        assert body["truncatedAlerts"] == 0
    assert {p.json()["groupLabels"]["instance"] for p in posts} == {"127.0.0.1:8001", "127.0.0.1:8002"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise AssertionError(f"it exited with {proc.returncode}: {err}")
        try:
            if httpx.get(url, trust_env=False, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} not ready within {timeout_s:g}s")


# ---------------------------------------------------------------- Prometheus


@pytest.fixture(scope="module")
def promtool() -> str:
    return _tool("promtool", "prometheus")


def test_promtool_checks_the_prometheus_config_with_its_rules(promtool: str) -> None:
    result = _run(promtool, "check", "config", PROM.name, cwd=PROM.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 1 rule files found" in result.stdout
    assert f"SUCCESS: {len(shipped_alerts())} rules found" in result.stdout


def test_promtool_catches_a_missing_rules_file(promtool: str, tmp_path: Path) -> None:
    shutil.copy(PROM, tmp_path / "prometheus.yml")  # no rules.yml beside it
    assert _run(promtool, "check", "config", "prometheus.yml", cwd=tmp_path).returncode != 0


def test_prometheus_scrapes_what_the_rules_and_the_doctor_need() -> None:
    text = PROM.read_text()
    jobs = dict(re.findall(r"^  - job_name: ([\w-]+)\n((?:(?!^  - job_name).*\n?)*)", text, re.M))
    assert set(re.findall(r'job="([\w-]+)"', RULES.read_text())) <= set(jobs)
    assert "127.0.0.1:8001" in jobs["vllm"] and "role: hot" in jobs["vllm"] and "role: cold" in jobs["vllm"]
    assert "127.0.0.1:9361" in jobs["serving-doctor"]
    assert "relabel" not in jobs["vllm"]  # the doctor maps an alert to an engine by instance = HOST:PORT
    assert re.search(r'targets: \["127\.0\.0\.1:9093"\]', text.split("scrape_configs:")[0])


# ---------------------------------------------------------------- systemd


def _unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=True, interpolation=None, empty_lines_in_values=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(UNIT.read_text())
    return parser


def _doctor_executable(tmp_path: Path) -> Path:
    """The doctor this checkout installed (its venv's console script), else a stand-in executable."""
    real = Path(sys.executable).parent / "doctor"
    if real.exists():
        return real
    stand_in = tmp_path / "doctor"
    stand_in.write_text("#!/bin/sh\nexit 0\n")
    stand_in.chmod(0o755)
    return stand_in


@pytest.fixture(scope="module")
def systemd_analyze(tmp_path_factory: pytest.TempPathFactory) -> str:
    """systemd-analyze, when it can verify units here (it needs no systemd as PID 1 for that)."""
    path = shutil.which("systemd-analyze")
    if path is None:
        pytest.skip("systemd-analyze is not installed (no systemd in this environment): the unit is not verified")
    probe = tmp_path_factory.mktemp("probe") / "probe.service"
    probe.write_text("[Unit]\nDescription=probe\n\n[Service]\nExecStart=/bin/true\n")
    result = _run(path, "verify", "--man=no", str(probe))
    if result.returncode != 0:
        pytest.skip(f"systemd-analyze cannot verify even a trivial unit here: {result.stderr.strip()[:300]}")
    return path


def _verifiable_copy(tmp_path: Path, text: str | None = None) -> Path:
    """The unit with its ExecStart pointing at a doctor that exists here (verify checks the binary)."""
    text = text if text is not None else UNIT.read_text()
    assert text.count("/opt/serving-doctor/bin/doctor ") == 1
    path = tmp_path / "serving-doctor.service"
    path.write_text(text.replace("/opt/serving-doctor/bin/doctor", str(_doctor_executable(tmp_path))))
    return path


def test_systemd_analyze_verifies_the_unit(systemd_analyze: str, tmp_path: Path) -> None:
    copy = _verifiable_copy(tmp_path)
    result = _run(systemd_analyze, "verify", "--man=no", str(copy))
    assert result.returncode == 0, result.stderr
    # unknown keys and unparsable values are warnings (exit 0): none may mention the unit
    assert [line for line in result.stderr.splitlines() if copy.name in line] == []


def test_systemd_analyze_catches_a_broken_copy(systemd_analyze: str, tmp_path: Path) -> None:
    copy = _verifiable_copy(tmp_path, UNIT.read_text().replace("ProtectSystem=strict", "ProtectSystm=strict"))
    result = _run(systemd_analyze, "verify", "--man=no", str(copy))
    assert "Unknown key 'ProtectSystm'" in result.stderr
    missing = tmp_path / "missing.service"
    missing.write_text(UNIT.read_text())  # /opt/serving-doctor/bin/doctor is not installed here
    if not Path("/opt/serving-doctor/bin/doctor").exists():
        assert _run(systemd_analyze, "verify", "--man=no", str(missing)).returncode != 0


def test_systemd_security_exposure_is_low(systemd_analyze: str, tmp_path: Path) -> None:
    copy = _verifiable_copy(tmp_path)
    result = _run(systemd_analyze, "security", "--offline=yes", "--no-pager", str(copy))
    if result.returncode != 0 and "offline" in result.stderr.lower():
        pytest.skip(f"this systemd-analyze cannot judge a unit file offline: {result.stderr.strip()[:200]}")
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout)
    assert match, result.stdout[-500:] + result.stderr
    assert float(match.group(1)) <= 3.0, result.stdout


def test_unit_runs_doctor_serve_hardened_but_networked() -> None:
    unit = _unit()
    svc = unit["Service"]
    argv = shlex.split(svc["ExecStart"])
    assert argv[1:] == ["serve", "--config", CONFIG]
    assert svc["User"] == "serving-doctor" and "DynamicUser" not in svc  # cron shares the state dir as this user
    assert svc["StateDirectory"] == Path(STATE_DIR).name
    assert (svc["ProtectSystem"], svc["NoNewPrivileges"], svc["ProtectHome"], svc["PrivateTmp"]) == \
        ("strict", "yes", "yes", "yes")
    assert svc["Restart"] == "on-failure" and parse_duration(svc["RestartSec"]) > 0
    assert {"AF_INET", "AF_INET6"} <= set(svc["RestrictAddressFamilies"].split())  # it reaches the engines
    for key in ("PrivateNetwork", "IPAddressDeny", "ProtectProc", "PrivateDevices"):
        assert key not in svc, f"{key} would cut the doctor off from engines, their processes or the GPUs"
    assert unit["Install"]["WantedBy"] == "multi-user.target"
    assert "network-online.target" in unit["Unit"]["After"]


# ---------------------------------------------------------------- cron


def _cron_lines() -> tuple[dict[str, str], list[str]]:
    env: dict[str, str] = {}
    jobs: list[str] = []
    for line in CRON.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = re.match(r"^([A-Z_]+)=(.*)$", line)
        if m:
            env[m.group(1)] = m.group(2)
        else:
            jobs.append(line)
    return env, jobs


_FIELD = re.compile(r"^(\*|\d+(-\d+)?)(/\d+)?(,(\*|\d+(-\d+)?)(/\d+)?)*$")


def _split_job(line: str) -> tuple[list[str], str, str]:
    parts = line.split(None, 6)
    assert len(parts) == 7, f"expected 5 time fields, a user and a command: {line!r}"
    return parts[:5], parts[5], parts[6]


def _tokens(command: str) -> list[str]:
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def _doctor_args(command: str) -> tuple[list[str], list[str]]:
    """The tokens before `doctor diagnose` (inside `sh -c '...'` when there is one) and diagnose's own arguments."""
    tokens = _tokens(command)
    if "-c" in tokens and tokens[tokens.index("-c") - 1] in ("sh", "/bin/sh"):
        tokens = _tokens(tokens[tokens.index("-c") + 1])
    at = next(i for i, t in enumerate(tokens) if t.endswith("/doctor") and tokens[i + 1] == "diagnose")
    rest = tokens[at + 2:]
    end = next((i for i, t in enumerate(rest) if set(t) <= set("|&;<>") or re.match(r"^\d?>", t)), len(rest))
    return tokens[:at], rest[:end]


def _timeout_s(before: list[str]) -> tuple[float, float]:
    """`timeout [-k KILL] LIMIT` among the tokens: (LIMIT, KILL) in seconds."""
    args = before[before.index("timeout") + 1:]
    kill = 0.0
    if args[0] == "-k":
        kill, args = parse_duration(args[1]), args[2:]
    return parse_duration(args[0]), kill


def test_cron_file_is_one_job_in_cron_d_format() -> None:
    text = CRON.read_text()
    assert text.endswith("\n") and re.match(r"^[A-Za-z0-9_-]+$", CRON.name)  # run-parts skips names with dots
    env, jobs = _cron_lines()
    assert env["SHELL"] == "/bin/sh" and "/usr/bin" in env["PATH"]
    assert len(jobs) == 1
    fields, user, command = _split_job(jobs[0])
    for field, (low, high) in zip(fields, [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)], strict=True):
        assert _FIELD.match(field), field
        assert all(low <= int(n) <= high for n in re.findall(r"(?<!/)\b\d+", field)), field
    assert user == _unit()["Service"]["User"]
    assert command.startswith(("flock -n ", "/usr/bin/flock -n ")) and command.split()[2].startswith(f"{STATE_DIR}/")
    assert "%" not in command  # cron would read it as a newline


def test_cron_command_uses_flags_doctor_diagnose_accepts() -> None:
    _, jobs = _cron_lines()
    _, _, command = _split_job(jobs[0])
    before, args = _doctor_args(command)
    ns = build_parser().parse_args(args)  # UsageError (a test failure) on a flag diagnose does not know
    assert ns.config == Path(CONFIG) and ns.state_dir == Path(STATE_DIR) and ns.timeout
    assert ns.format == "json" and ns.fix
    hard_limit, kill = _timeout_s(before)
    assert parse_duration(ns.timeout) < hard_limit and hard_limit + kill < 120, \
        "the backstop must outlast --timeout, and a hung run end before two more have been skipped"
    assert ns.format == "json" and f">{STATE_DIR}/diagnose-last.json.tmp" in command.replace("> ", ">")
    example = [a if a != CONFIG else str(EXAMPLE) for a in args]
    opts = parse_options(example)  # the whole parse, with the shipped example config
    assert opts.timeout_s == parse_duration(ns.timeout) and opts.state_dir == Path(STATE_DIR)


def test_cron_command_runs_and_skips_while_a_run_holds_the_lock(tmp_path: Path) -> None:
    """The line itself through /bin/sh: the report lands in the state dir, errors in the pipe; a held lock skips."""
    _, jobs = _cron_lines()
    _, _, command = _split_job(jobs[0])
    state = tmp_path / "state"
    state.mkdir()
    (tmp_path / "doctor.toml").write_text(f'[doctor]\nsample_s = "0.1s"\n\n[[engines]]\nname = "hot"\n'
                                          f'url = "http://127.0.0.1:{_free_port()}"\n')
    logger = " | logger -t serving-doctor-cron -p user.warning"
    assert command.endswith(logger)
    local = (command.removesuffix(logger) + f" | cat > {tmp_path / 'stderr.txt'}") \
        .replace("/opt/serving-doctor/bin/doctor", str(Path(sys.executable).parent / "doctor")) \
        .replace(STATE_DIR, str(state)).replace(CONFIG, str(tmp_path / "doctor.toml"))
    result = subprocess.run(["/bin/sh", "-c", local], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout == "" and result.stderr == ""
    report = json.loads((state / "diagnose-last.json").read_text())
    assert report["status"] == "unknown" and report["engines"][0]["name"] == "hot"
    assert "no engine could be read" in (tmp_path / "stderr.txt").read_text()
    first = (state / "diagnose-last.json").read_text()
    with open(state / "cron.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        skipped = subprocess.run(["/bin/sh", "-c", local], capture_output=True, text=True, timeout=120)
    assert skipped.returncode == 0 and (tmp_path / "stderr.txt").read_text() == ""  # quiet
    assert (state / "diagnose-last.json").read_text() == first  # the last report is left alone
    assert not (state / "diagnose-last.json.tmp").exists()


# ---------------------------------------------------------------- the runbook


def test_runbook_names_the_files_the_doctor_writes_and_the_files_shipped() -> None:
    from doctor.config import DoctorConfig
    from doctor.remedy.guardrails import STATE_FILE
    from doctor.remedy.journal import JOURNAL_FILE
    from doctor.remedy.queue import STORE_FILE

    text = (DEPLOY / "README.md").read_text()
    executor = (ROOT / "doctor" / "remedy" / "executor.py").read_text()
    assert 'state_dir / "audit.jsonl"' in executor and "`audit.jsonl`" in text
    for name in (JOURNAL_FILE, STORE_FILE, STATE_FILE, "history.jsonl", "playbooks.json", "diagnose-last.json"):
        assert f"`{name}`" in text, name
    assert f"touch {DoctorConfig().kill_switch_path(Path(STATE_DIR))}" in text
    shipped = [n for row in re.findall(r"^\| `([\w/.-]+)`(?:, `([\w/.-]+)`)? \|", text, re.M) for n in row if n]
    assert len(shipped) == 5 and all((DEPLOY / name).is_file() for name in shipped), shipped
