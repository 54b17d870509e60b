"""Engine identity: which engines the doctor looks after, as given by flags or the config."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

Role = Literal["hot", "cold"]


class EngineSpecError(ValueError):
    """An --engine/--role/--log/--dcgm value that cannot be used; the message names it."""


@dataclass(frozen=True)
class EngineRef:
    """One engine: its name, role, where to reach it and what belongs to it."""

    name: str
    role: Role | None
    url: str
    log: str | None = None
    log_command: tuple[str, ...] = ()
    gpus: tuple[int, ...] = ()
    dcgm: str | None = None
    selector: str | None = None  # PromQL label selector in Prometheus mode
    launcher: str | None = None
    config: dict[str, int | float] = field(default_factory=dict)  # max_num_seqs etc. when known

    def int_arg(self, key: str) -> int | None:
        """A whole-number engine argument from `config` (max_num_seqs, ...), None when not known."""
        v = self.config.get(key)
        return None if v is None else int(v)

    @property
    def instance(self) -> str:
        """host:port, the `instance` label Prometheus gives this engine's series."""
        parts = urlsplit(self.url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return f"{parts.hostname}:{port}"

    @property
    def promql_selector(self) -> str:
        return self.selector or f'instance="{self.instance}"'


def _pairs(values: list[str], flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name or not rest:
            raise EngineSpecError(f"{flag} {value!r}: expected NAME=VALUE")
        if name in out:
            raise EngineSpecError(f"{flag} names {name!r} twice")
        out[name] = rest
    return out


def _check_url(name: str, url: str) -> str:
    try:
        parts = urlsplit(url)
    except ValueError:  # "Invalid IPv6 URL": an unbalanced [ or ]
        raise EngineSpecError(f"--engine {name}={url}: the URL must look like http://HOST:PORT") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EngineSpecError(f"--engine {name}={url}: the URL must look like http://HOST:PORT")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise EngineSpecError(f"--engine {name}={url}: bad port") from None
    return url.rstrip("/")


def engines_from_flags(engines: list[str], roles: list[str] | None = None, logs: list[str] | None = None,
                       dcgm: list[str] | None = None, gpus: list[str] | None = None) -> list[EngineRef]:
    """`--engine NAME=URL` (NAME `hot`/`cold` is also the role), `--role NAME=hot|cold`, `--log NAME=PATH`..."""
    urls = _pairs(engines, "--engine")
    role_map = _pairs(roles or [], "--role")
    log_map = _pairs(logs or [], "--log")
    dcgm_map = _pairs(dcgm or [], "--dcgm")
    gpu_map = _pairs(gpus or [], "--gpus")
    for flag, mapping in (("--role", role_map), ("--log", log_map), ("--dcgm", dcgm_map), ("--gpus", gpu_map)):
        for name in mapping:
            if name not in urls:
                raise EngineSpecError(f"{flag} {name}=...: no --engine named {name!r}")
    refs: list[EngineRef] = []
    for name, url in urls.items():
        role = role_map.get(name) or (name if name in ("hot", "cold") else None)
        if role not in (None, "hot", "cold"):
            raise EngineSpecError(f"--role {name}={role}: the role must be hot or cold")
        try:
            gpu_ids = tuple(int(g) for g in gpu_map[name].split(",")) if name in gpu_map else ()
        except ValueError:
            raise EngineSpecError(f"--gpus {name}={gpu_map[name]}: expected GPU indices like 0,1") from None
        refs.append(EngineRef(name=name, role=role, url=_check_url(name, url),  # type: ignore[arg-type]
                              log=log_map.get(name), dcgm=dcgm_map.get(name), gpus=gpu_ids))
    return refs
