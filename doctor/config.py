"""doctor.toml: engines with roles, thresholds, SLOs, templates and the remediation guardrails.

One TOML file (see examples/doctor.toml for every key, commented). Keys carry their unit (`*_s`,
`*_ms`, `*_ratio`, `*_tokens`); durations may be written as seconds or like "5m". Every error is a
`ConfigError` reading `FILE:LINE: KEY.PATH: what is wrong and what is allowed` (the line when it can
be found). `DoctorConfig` implements `doctor.pipeline.PlaybookSettings`.
"""

from __future__ import annotations

import functools
import importlib
import re
import shlex
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from doctor.config_launcher import LauncherSettings, launcher_settings
from doctor.config_notify import NotifySettings, notify_settings
from doctor.config_schema import (
    Checker,
    ConfigError,
    Table,
    check_duration,
    check_number,
    describe,
    parse_toml,
    suggest,
)
from doctor.config_serve import ServeSettings, serve_settings
from doctor.engines import EngineRef, Role
from playbooks import registry

if TYPE_CHECKING:
    from doctor.config_k8s import K8sWorkload

__all__ = ["ConfigError", "DoctorConfig", "EngineConfig", "load_config"]

Mode = Literal["observe", "dry-run", "approve", "auto"]
MODES: tuple[str, ...] = ("observe", "dry-run", "approve", "auto")
ROLES: tuple[str, ...] = ("hot", "cold")
SLO_KEYS: tuple[str, ...] = ("p99_ttft_s", "p99_e2e_s", "p95_ttft_s", "p95_itl_s")
ENGINE_ARGS: tuple[str, ...] = ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "tensor_parallel_size")
# Placeholders an engine's `launcher` template may use ({name}, {port}, ...). vLLM arguments need the
# engine's key set, except tensor_parallel_size (1); {gpus} is "0,1" (for CUDA_VISIBLE_DEVICES).
LAUNCHER_FIELDS: tuple[str, ...] = ("name", "host", "port", "url", "gpus", "state_dir", "log",
                                    *ENGINE_ARGS, "gpu_memory_utilization")
# Range ceilings (beyond them a value is a typo): tokens (the longest context windows are ~10M), GPUs per pool.
MAX_TOKENS = 100_000_000
MAX_GPUS = 1024
HOUR_S, DAY_S = 3600.0, 86400.0
DAYS: tuple[str, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_HHMM = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")


@dataclass(frozen=True)
class EngineConfig:
    """One [[engines]] entry."""

    name: str
    url: str
    role: Role | None = None
    log: str | None = None
    log_command: tuple[str, ...] = ()
    gpus: tuple[int, ...] = ()
    dcgm: str | None = None
    selector: str | None = None
    launcher: str | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    tensor_parallel_size: int | None = None
    gpu_memory_utilization: float | None = None
    slo: Mapping[str, float] = field(default_factory=dict)
    thresholds: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    playbooks: Mapping[str, bool] = field(default_factory=dict)  # per-engine enabled overrides
    kubernetes: K8sWorkload | None = None  # [engines.kubernetes]: its Deployment or LeaderWorkerSet

    def ref(self) -> EngineRef:
        args: dict[str, int | float] = {k: v for k in (*ENGINE_ARGS, "gpu_memory_utilization")
                                        if (v := getattr(self, k)) is not None}
        return EngineRef(name=self.name, role=self.role, url=self.url, log=self.log, log_command=self.log_command,
                         gpus=self.gpus, dcgm=self.dcgm, selector=self.selector, launcher=self.launcher,
                         config=args)

    def launcher_values(self, state_dir: Path | str = "", **changes: Any) -> dict[str, str]:
        """Values for the launcher template; `changes` (e.g. max_num_seqs=6) replace the configured ones."""
        ref = self.ref()
        values: dict[str, Any] = {"name": self.name, "host": ref.instance.rsplit(":", 1)[0],
                                  "port": ref.instance.rsplit(":", 1)[1], "url": self.url,
                                  "gpus": ",".join(map(str, self.gpus)), "state_dir": str(state_dir),
                                  "log": self.log or "", "tensor_parallel_size": self.tensor_parallel_size or 1,
                                  "gpu_memory_utilization": self.gpu_memory_utilization}
        values.update({k: getattr(self, k) for k in ENGINE_ARGS if getattr(self, k) is not None})
        values.update(changes)
        return {k: "" if v is None else str(v) for k, v in values.items()}

    def launch_command(self, state_dir: Path | str = "", **changes: Any) -> str:
        """The launcher template filled in (a shell command line)."""
        if not self.launcher:
            raise ValueError(f"engine {self.name!r} has no launcher command in the config")
        values = {k: shlex.quote(v) for k, v in self.launcher_values(state_dir, **changes).items()}
        return self.launcher.format(**values)


@dataclass(frozen=True)
class PlaybookConfig:
    """[playbooks.<id>]: on/off, the remediation mode for this playbook (None: the global mode), and how long its
    condition must hold before it is reported (None: the playbook's own `for`)."""

    enabled: bool = True
    mode: Mode | None = None
    for_s: float | None = None


@dataclass(frozen=True)
class Templates:
    """[templates]: prompts replayed to re-warm the prefix cache (on `engines`, or on all when empty)."""

    prompts: tuple[str, ...] = ()
    variations: int = 1
    engines: tuple[str, ...] = ()


@dataclass(frozen=True)
class RouterSettings:
    """[router]: the router's policy API; the token is read from `token_file` when set, else `token_env`."""

    url: str | None = None
    token_env: str = "ROUTER_POLICY_TOKEN"
    token_file: Path | None = None

    def token(self, environ: Mapping[str, str]) -> str | None:
        """SecretFileError (a ValueError naming the file) when the token file cannot be used."""
        from doctor.secrets import load_token

        return load_token(self.token_file, self.token_env, environ)


@dataclass(frozen=True)
class Escalation:
    """[escalation]: Alertmanager v2 API base URL (preferred) or a webhook URL."""

    alertmanager_url: str | None = None
    webhook_url: str | None = None


@dataclass(frozen=True)
class Bounds:
    """[bounds]: limits every action must stay within (None: the engines' own limits)."""

    batch_timeout_min_ms: int = 50
    batch_timeout_max_ms: int = 200
    length_limit_max_tokens: int | None = None  # None: the engines' max_model_len
    tensor_parallel_max: int | None = None  # None: the free GPUs
    gpu_pool: tuple[int, ...] = ()  # GPUs the launcher may start engines on (blue/green, replicas); (): unknown


@dataclass(frozen=True)
class MaintenanceWindow:
    """[[maintenance]]: a weekly window `start`-`end` ("HH:MM", an end before the start runs past midnight)."""

    start: time
    end: time
    days: tuple[str, ...] = DAYS  # the days the window starts on
    timezone: str = "UTC"
    reason: str = ""

    def contains(self, when: datetime) -> bool:
        """Is `when` (timezone-aware; naive means UTC) inside this window?"""
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        local = when.astimezone(_zone(self.timezone))
        t, day = local.time().replace(tzinfo=None), DAYS[local.weekday()]
        if self.start < self.end:
            return day in self.days and self.start <= t < self.end
        yesterday = DAYS[(local - timedelta(days=1)).weekday()]
        return (day in self.days and t >= self.start) or (yesterday in self.days and t < self.end)


@dataclass(frozen=True)
class DoctorConfig:
    """The whole config. Built by `load_config`, or `DoctorConfig()` (defaults) for flags alone."""

    path: Path | None = None
    state_dir: Path | None = None  # None: $XDG_STATE_HOME/serving-doctor
    mode: Mode = "observe"
    timeout_s: float = 30.0
    sample_s: float = 5.0
    window_s: float = 60.0  # what each run judges: rates, shares and percentiles over this long (earlier runs' reads)
    min_requests: int = 10  # a share or percentile from fewer requests than this is too few to judge
    request_timeout_s: float = 5.0
    verify_s: float = 120.0
    long_prompt_tokens: int = 5120
    very_long_prompt_tokens: int = 8192
    kill_switch_file: Path | None = None  # None: STATE_DIR/kill-switch
    hourly_action_budget: int = 6
    fleet_breaker_ratio: float = 0.5
    cooldown_s: float = 900.0
    length_limit_lift_after_s: float = 600.0  # lift the doctor's own emergency limit once idle this long; 0 = never
    length_limit_lift_max_refusals: int = 3  # ... or once it refused at most this many requests over that long
    engines: tuple[EngineConfig, ...] = ()
    thresholds: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    playbooks: Mapping[str, PlaybookConfig] = field(default_factory=dict)
    templates: Templates = Templates()
    router: RouterSettings = RouterSettings()
    prometheus_url: str | None = None
    # [prometheus] discover: target labels (job, ...) whose active targets are engines too (doctor.discover)
    prometheus_discover: Mapping[str, str] = field(default_factory=dict)
    max_concurrent_reads: int = 64  # [doctor]: engines read at once
    escalation: Escalation = Escalation()
    maintenance: tuple[MaintenanceWindow, ...] = ()
    bounds: Bounds = Bounds()
    notify: NotifySettings = field(default_factory=NotifySettings)
    serve: ServeSettings = field(default_factory=ServeSettings)  # [serve]: the daemon (doctor/config_serve.py)
    launcher: LauncherSettings = field(default_factory=LauncherSettings)  # [launcher] (doctor/config_launcher.py)

    # -- doctor.pipeline.PlaybookSettings
    def params_for(self, playbook_id: str, engine: str) -> Mapping[str, float]:
        """Threshold overrides: [thresholds.<id>], then [engines.thresholds.<id>] (defaults come from the playbook;
        `route_threshold_tokens` from `long_prompt_tokens`, doctor.pipeline.run_playbooks)."""
        out = dict(self.thresholds.get(playbook_id, {}))
        eng = self.engine(engine)
        if eng is not None:
            out.update(eng.thresholds.get(playbook_id, {}))
        return out

    def playbook_enabled(self, playbook_id: str, engine: str) -> bool:
        eng = self.engine(engine)
        if eng is not None and playbook_id in eng.playbooks:
            return eng.playbooks[playbook_id]
        return self.playbooks.get(playbook_id, PlaybookConfig()).enabled

    def for_of(self, playbook_id: str) -> float | None:
        """[playbooks.<id>] for_s: the `for` the config sets for that playbook (None: its own)."""
        return self.playbooks.get(playbook_id, PlaybookConfig()).for_s

    def slo_for(self, engine: str) -> Mapping[str, float]:
        eng = self.engine(engine)
        return dict(eng.slo) if eng is not None else {}

    def templates_configured(self, engine: str) -> bool:
        return bool(self.templates.prompts) and (not self.templates.engines or engine in self.templates.engines)

    # -- the rest of the doctor
    def engine(self, name: str) -> EngineConfig | None:
        return self._engines_by_name.get(name)

    @functools.cached_property
    def _engines_by_name(self) -> dict[str, EngineConfig]:
        """Asked per engine and playbook: a scan of 1,000 engines each time was 3% of judging them."""
        by_name: dict[str, EngineConfig] = {}
        for e in self.engines:
            by_name.setdefault(e.name, e)  # the first of a name, as the scan found it
        return by_name

    def engine_refs(self) -> list[EngineRef]:
        return [e.ref() for e in self.engines]

    def mode_for(self, playbook_id: str) -> str:
        """The remediation mode for a playbook's actions: its own when set, else the global one."""
        return self.playbooks.get(playbook_id, PlaybookConfig()).mode or self.mode

    def in_maintenance(self, when: datetime) -> bool:
        return any(w.contains(when) for w in self.maintenance)

    def kill_switch_path(self, state_dir: Path) -> Path:
        return self.kill_switch_file or state_dir / "kill-switch"


# ---------------------------------------------------------------- loading

TOP_KEYS = ("doctor", "engines", "thresholds", "playbooks", "templates", "router", "prometheus", "escalation",
            "maintenance", "bounds", "notify", "serve", "launcher")
DOCTOR_KEYS = ("state_dir", "mode", "timeout_s", "sample_s", "window_s", "min_requests", "request_timeout_s",
               "verify_s", "long_prompt_tokens", "very_long_prompt_tokens", "kill_switch_file", "hourly_action_budget",
               "fleet_breaker_ratio", "cooldown_s", "length_limit_lift_after_s", "length_limit_lift_max_refusals",
               "max_concurrent_reads")
ENGINE_KEYS = ("name", "role", "url", "log", "log_command", "gpus", "dcgm", "selector", "launcher", *ENGINE_ARGS,
               "gpu_memory_utilization", "slo", "thresholds", "playbooks", "kubernetes")


def load_config(path: Path) -> DoctorConfig:
    """Read and check doctor.toml; raises ConfigError naming the file, key path and line."""
    doc, checker = parse_toml(Path(path))
    return config_from_dict(doc, checker, Path(path))


def config_from_dict(doc: dict[str, Any], checker: Checker | None = None, path: Path | None = None) -> DoctorConfig:
    """Check a parsed document (tests and callers with an already-parsed TOML)."""
    root = Table(checker or Checker(str(path or "<config>")), doc)
    root.only(TOP_KEYS)
    d = root.sub("doctor")
    d.only(DOCTOR_KEYS)
    long_tokens = cast(int, d.integer("long_prompt_tokens", 5120, minimum=1, maximum=MAX_TOKENS))
    very_long = cast(int, d.integer("very_long_prompt_tokens", 8192, minimum=1, maximum=MAX_TOKENS))
    if very_long < long_tokens:
        raise d.error("very_long_prompt_tokens", f"must be >= long_prompt_tokens ({long_tokens}), got {very_long}")
    state_dir = d.string("state_dir")
    kill = d.string("kill_switch_file")
    engines = tuple(_engine(t, path) for t in root.tables("engines"))
    names = [e.name for e in engines]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise root.checker.error(("engines", i, "name"), f"engine name '{name}' is already used by "
                                     f"engines[{names.index(name)}]; names must be unique")
    thresholds = _thresholds(root.sub("thresholds"))
    pb = root.sub("playbooks")
    playbooks: dict[str, PlaybookConfig] = {}
    for pid in pb.data:
        _check_id(pb, pid)
        t = pb.sub(pid)
        t.only(("enabled", "mode", "for_s"))
        playbooks[pid] = PlaybookConfig(t.boolean("enabled", True), cast(Mode | None, t.string("mode", choices=MODES)),
                                        t.duration("for_s", positive=False))
    tp = root.sub("templates")
    tp.only(("prompts", "variations", "engines"))
    templates = Templates(tp.strings("prompts"), cast(int, tp.integer("variations", 1, minimum=1, maximum=1000)),
                          tp.strings("engines"))
    for i, name in enumerate(templates.engines):
        if name not in names:
            raise tp.error("engines", f"item {i}: no engine named '{name}'{suggest(name, names)} "
                                      f"(engines: {', '.join(names) or 'none configured'})")
    r = root.sub("router")
    r.only(("url", "token_env", "token_file"))
    token_file = r.string("token_file")
    router = RouterSettings(r.url("url"), cast(str, r.string("token_env", "ROUTER_POLICY_TOKEN")),
                            _file(token_file, path))
    prom = root.sub("prometheus")
    prom.only(("url", "discover"))
    disc = prom.sub("discover")
    discover = {str(k): cast(str, disc.string(str(k), required=True)) for k in disc.data}
    if discover and not prom.has("url"):
        raise prom.error("discover", "needs [prometheus] url: the targets are Prometheus's")
    esc = root.sub("escalation")
    esc.only(("alertmanager_url", "webhook_url"))
    b = root.sub("bounds")
    b.only(("batch_timeout_min_ms", "batch_timeout_max_ms", "length_limit_max_tokens", "tensor_parallel_max",
            "gpu_pool"))
    bounds = Bounds(cast(int, b.integer("batch_timeout_min_ms", 50, minimum=1, maximum=10_000)),
                    cast(int, b.integer("batch_timeout_max_ms", 200, minimum=1, maximum=10_000)),
                    b.integer("length_limit_max_tokens", minimum=1, maximum=MAX_TOKENS),
                    b.integer("tensor_parallel_max", minimum=1, maximum=MAX_GPUS),
                    b.integers("gpu_pool", maximum=MAX_GPUS - 1))
    if bounds.batch_timeout_min_ms > bounds.batch_timeout_max_ms:
        raise b.error("batch_timeout_min_ms", f"must be <= batch_timeout_max_ms ({bounds.batch_timeout_max_ms}), "
                                              f"got {bounds.batch_timeout_min_ms}")
    launcher = launcher_settings(root.sub("launcher"))
    on_k8s = [e.name for e in engines if e.kubernetes is not None]
    if launcher.backend == "ray" and on_k8s:
        raise ConfigError(str(path), "launcher.backend",
                          f"\"ray\" with [engines.kubernetes] for {', '.join(on_k8s)}: an engine is started by one "
                          "launcher (Ray, or its Kubernetes workload), not both; remove one")
    return DoctorConfig(
        path=path, state_dir=_file(state_dir, path),
        mode=cast(Mode, d.string("mode", "observe", choices=MODES)),
        timeout_s=cast(float, d.duration("timeout_s", 30.0, maximum=DAY_S)),
        sample_s=cast(float, d.duration("sample_s", 5.0, maximum=HOUR_S)),
        window_s=cast(float, d.duration("window_s", 60.0)),
        min_requests=cast(int, d.integer("min_requests", 10, minimum=1, maximum=100_000)),
        request_timeout_s=cast(float, d.duration("request_timeout_s", 5.0, maximum=HOUR_S)),
        verify_s=cast(float, d.duration("verify_s", 120.0, maximum=DAY_S)),
        long_prompt_tokens=long_tokens, very_long_prompt_tokens=very_long,
        kill_switch_file=_file(kill, path),
        hourly_action_budget=cast(int, d.integer("hourly_action_budget", 6, minimum=0, maximum=1000)),
        fleet_breaker_ratio=cast(float, d.ratio("fleet_breaker_ratio", 0.5)),
        cooldown_s=cast(float, d.duration("cooldown_s", 900.0, positive=False)),
        length_limit_lift_after_s=cast(float, d.duration("length_limit_lift_after_s", 600.0, positive=False)),
        length_limit_lift_max_refusals=cast(int, d.integer("length_limit_lift_max_refusals", 3, minimum=0,
                                                           maximum=1_000_000)),
        engines=engines, thresholds=thresholds, playbooks=playbooks, templates=templates, router=router,
        prometheus_url=prom.url("url"),
        prometheus_discover=discover,
        max_concurrent_reads=cast(int, d.integer("max_concurrent_reads", 64, minimum=1, maximum=10_000)),
        escalation=Escalation(esc.url("alertmanager_url"), esc.url("webhook_url")),
        maintenance=tuple(_window(t) for t in root.tables("maintenance")), bounds=bounds,
        notify=notify_settings(root.sub("notify"), lambda v: _file(v, path)),
        serve=serve_settings(root.sub("serve"), path, _file), launcher=launcher)


def _engine(t: Table, path: Path | None) -> EngineConfig:
    t.only(ENGINE_KEYS)
    name = cast(str, t.string("name", required=True))
    if not _NAME.match(name):
        raise t.error("name", f"expected letters, digits, '_', '.' or '-' (it names files and flags), got "
                              f"{describe(name)}")
    role = t.string("role", name if name in ROLES else None, choices=ROLES)
    log_path, log_command = _file(t.string("log"), path), t.strings("log_command", non_empty=t.has("log_command"))
    log = str(log_path) if log_path else None
    if log and log_command:
        raise t.error("log_command", "give either log (a file) or log_command (a command printing the log), not both")
    gmu = t.number("gpu_memory_utilization", minimum=0.01, maximum=1.0)
    slo_t = t.sub("slo")
    slo_t.only(SLO_KEYS)
    slo = {k: cast(float, slo_t.duration(k)) for k in SLO_KEYS if slo_t.has(k)}
    pb = t.sub("playbooks")
    enabled: dict[str, bool] = {}
    for pid in pb.data:
        _check_id(pb, pid)
        sub = pb.sub(pid)
        sub.only(("enabled",))
        enabled[pid] = sub.boolean("enabled", True)
    eng = EngineConfig(
        name=name, url=cast(str, t.url("url", required=True)), role=cast(Role | None, role), log=log,
        log_command=log_command, gpus=t.integers("gpus", maximum=MAX_GPUS - 1), dcgm=t.url("dcgm"),
        selector=t.string("selector"),
        launcher=t.string("launcher"), max_num_seqs=t.integer("max_num_seqs", minimum=1, maximum=1_000_000),
        max_num_batched_tokens=t.integer("max_num_batched_tokens", minimum=1, maximum=MAX_TOKENS),
        max_model_len=t.integer("max_model_len", minimum=1, maximum=MAX_TOKENS),
        tensor_parallel_size=t.integer("tensor_parallel_size", minimum=1, maximum=MAX_GPUS), gpu_memory_utilization=gmu,
        slo=slo, thresholds=_thresholds(t.sub("thresholds")), playbooks=enabled,
        kubernetes=_kubernetes(t))
    if eng.launcher:
        _check_launcher(t, eng)
    return eng


def _kubernetes(t: Table) -> K8sWorkload | None:
    """[engines.kubernetes] (doctor/config_k8s.py), None when absent."""
    from doctor.config_k8s import k8s_workload

    return k8s_workload(t.sub("kubernetes")) if t.has("kubernetes") else None


def _file(value: str | None, config_path: Path | None) -> Path | None:
    """A path from the config: `~` expanded; relative paths are relative to the config file's folder."""
    if not value:
        return None
    p = Path(value).expanduser()
    return p if p.is_absolute() or config_path is None else config_path.parent / p


def _check_launcher(t: Table, eng: EngineConfig) -> None:
    template = cast(str, eng.launcher)
    try:
        parsed = list(string.Formatter().parse(template))
        shlex.split(template)
    except ValueError as e:
        raise t.error("launcher", f"cannot read the command template: {e} (placeholders look like {{port}}; "
                                  "write a literal brace as {{ or }})") from None
    for _, field_name, _, _ in parsed:
        if field_name is None:
            continue
        if field_name not in LAUNCHER_FIELDS:
            raise t.error("launcher", f"unknown placeholder {{{field_name}}}{suggest(field_name, LAUNCHER_FIELDS)} "
                                      f"(allowed: {', '.join('{' + f + '}' for f in LAUNCHER_FIELDS)})")
        needs_key = field_name in (*ENGINE_ARGS, "gpu_memory_utilization", "log", "gpus")
        if needs_key and field_name != "tensor_parallel_size" and not getattr(eng, field_name):
            raise t.error("launcher", f"uses {{{field_name}}} but this engine sets no '{field_name}'; "
                                      f"set it so the doctor knows the current value")


def _check_id(table: Table, pid: str) -> None:
    if pid not in registry.ids():
        raise table.error(pid, f"unknown playbook id '{pid}'{suggest(pid, registry.ids())} "
                               f"(known ids: {', '.join(registry.ids())})")


def _defaults_of(table: Table, pid: str) -> Mapping[str, float]:
    try:  # one module per playbook, named by its id (playbooks/registry.py)
        module = importlib.import_module(f"playbooks.{pid}")
        return cast(Mapping[str, float], module.PLAYBOOK.defaults)
    except Exception as e:  # a module not written yet, or broken: say so instead of crashing
        raise table.error(pid, f"playbook '{pid}' is registered but cannot be loaded ({type(e).__name__}: {e}), "
                               "so its thresholds cannot be checked") from None


def _thresholds(t: Table) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for pid in t.data:
        _check_id(t, pid)
        sub = t.sub(pid)
        defaults = _defaults_of(t, pid)
        if not defaults and sub.data:
            raise sub.error(next(iter(sub.data)), f"playbook '{pid}' has no thresholds to set")
        sub.only(tuple(defaults))
        out[pid] = {k: _param(sub, k, v, defaults[k]) for k, v in sub.data.items()}
    return out


def _param(t: Table, key: str, value: Any, default: float) -> float:
    """A threshold: a number (a duration for `*_s`, up to 30 days), 0..1 for ratios, never negative unless the
    default is."""
    if key.endswith("_s") and not key.endswith("_per_s") and (isinstance(value, str) or default >= 0):
        return check_duration(t, key, value, positive=False)
    if key.endswith(("_ratio", "_share", "_rate")) and 0 <= default <= 1:
        return check_number(t, key, value, 0.0, 1.0)
    return check_number(t, key, value, 0.0 if default >= 0 else None)


def _window(t: Table) -> MaintenanceWindow:
    t.only(("days", "start", "end", "timezone", "reason"))
    days = tuple(_day(t, i, d) for i, d in enumerate(t.strings("days", non_empty=t.has("days")))) or DAYS
    tz = cast(str, t.string("timezone", "UTC"))
    try:
        _zone(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise t.error("timezone", f"unknown time zone {describe(tz)}; expected an IANA name like UTC or "
                                  "Europe/Berlin") from None
    start, end = _hhmm(t, "start"), _hhmm(t, "end")
    if start == end:
        raise t.error("end", "equals start; a window needs a length")
    return MaintenanceWindow(start, end, days, tz, t.string("reason", "") or "")


def _day(t: Table, i: int, text: str) -> str:
    """Mon ... Sun, any case, short or full."""
    full = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
    low = text.strip().lower()
    if low in DAYS or low in full:
        return low[:3]
    raise t.error("days", f"item {i}: expected a day like Mon, Tue ... Sun, got {describe(text)}")


def _hhmm(t: Table, key: str) -> time:
    value = t.data.get(key)
    if value is None:
        raise t.error(None, f"missing required key '{key}' (a time like \"02:00\")")
    if isinstance(value, time):
        return value.replace(tzinfo=None)
    m = _HHMM.match(value) if isinstance(value, str) else None
    if m is None:
        raise t.error(key, f"expected a time of day like \"02:00\" (24-hour HH:MM), got {describe(value)}")
    return time(int(m.group(1)), int(m.group(2)))


def _zone(name: str) -> tzinfo:
    return UTC if name.upper() == "UTC" else ZoneInfo(name)
