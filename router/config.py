"""The router's own small configuration (router.toml): where it listens, its files, its defaults.

Every key is optional. Errors name the key and say what is allowed.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

TOKEN_METHODS = ("estimate", "engine", "tokenizer")
HTTP_SERVERS = ("lean", "uvicorn")


class ConfigError(ValueError):
    """A router.toml that cannot be used; the message names the key."""


@dataclass
class RouterConfig:
    """Settings read once at start (the policy, which changes at run time, lives in policy.py)."""

    host: str = "127.0.0.1"
    port: int = 8080
    hot: list[str] = field(default_factory=list)  # initial hot upstream URLs
    cold: list[str] = field(default_factory=list)  # initial cold upstream URLs
    policy_file: str = "router-policy.json"  # "" = do not persist (tests only)
    token_env: str = "ROUTER_POLICY_TOKEN"
    token_file: str = ""
    token_counter: str = "estimate"  # estimate | engine | tokenizer
    tokenizer_file: str = ""
    chars_per_token: float = 4.0
    max_body_bytes: int = 10 * 1024 * 1024
    max_header_bytes: int = 32 * 1024  # request line + headers; over it: 431
    http_server: str = "lean"  # lean (router/lean.py) | uvicorn (the ASGI server it replaced)
    tls_cert_file: str = ""  # PEM certificate (chain): serve https when set, with tls_key_file
    tls_key_file: str = ""  # PEM private key; must not be readable by the group or others
    connect_timeout_s: float = 2.0
    upstream_timeout_s: float = 300.0  # longest wait for the next bytes from an engine
    health_interval_s: float = 2.0
    health_timeout_s: float = 1.0
    history_keep: int = 200
    # initial policy values (used when no policy file exists yet)
    route_threshold_tokens: int = 5120
    batch_timeout_ms: int = 0
    fairness_window: int = 10
    max_queue: int = 1024
    max_in_flight: int = 256


_SECTIONS = ("router", "policy")


def _check(name: str, value: Any, default: Any) -> Any:
    if isinstance(default, bool) or default is None:
        return value
    if isinstance(default, list):
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{name}: expected a URL or a list of URLs, got {value!r}")
        return list(value)
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{name}: expected a number, got {value!r}")
        if value < 0:
            raise ConfigError(f"{name}: must not be negative, got {value!r}")
        return float(value)
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{name}: expected an integer, got {value!r}")
        if value < 0:
            raise ConfigError(f"{name}: must not be negative, got {value!r}")
        return value
    if not isinstance(value, str):
        raise ConfigError(f"{name}: expected a string, got {value!r}")
    return value


def config_from_dict(doc: dict[str, Any], base: RouterConfig | None = None) -> RouterConfig:
    """Apply a parsed TOML document (flat keys, or [router] and [policy] tables) over `base`."""
    cfg = base or RouterConfig()
    known = {f.name: f for f in fields(RouterConfig)}
    flat: dict[str, Any] = {}
    for key, value in doc.items():
        if key in _SECTIONS and isinstance(value, dict):
            for k, v in value.items():
                flat[f"{key}.{k}"] = v
        else:
            flat[key] = value
    for dotted, value in flat.items():
        name = dotted.split(".", 1)[-1]
        if name not in known:
            raise ConfigError(f"{dotted}: unknown key; allowed: {', '.join(sorted(known))}")
        setattr(cfg, name, _check(dotted, value, getattr(RouterConfig(), name)))
    validate(cfg)
    return cfg


def validate(cfg: RouterConfig) -> None:
    if cfg.token_counter not in TOKEN_METHODS:
        raise ConfigError(f"token_counter: {cfg.token_counter!r} is not one of {', '.join(TOKEN_METHODS)}")
    if cfg.token_counter == "tokenizer" and not cfg.tokenizer_file:
        raise ConfigError("tokenizer_file: required when token_counter = \"tokenizer\"")
    if cfg.http_server not in HTTP_SERVERS:
        raise ConfigError(f"http_server: {cfg.http_server!r} is not one of {', '.join(HTTP_SERVERS)}")
    if cfg.chars_per_token <= 0:
        raise ConfigError("chars_per_token: must be > 0")
    if cfg.max_body_bytes < 1024:
        raise ConfigError("max_body_bytes: must be at least 1024")
    if cfg.max_header_bytes < 1024:
        raise ConfigError("max_header_bytes: must be at least 1024")
    if bool(cfg.tls_cert_file) != bool(cfg.tls_key_file):
        raise ConfigError("tls_cert_file, tls_key_file: give both (the certificate and its private key) or neither")
    if not 0 < cfg.port < 65536 and cfg.port != 0:
        raise ConfigError(f"port: {cfg.port} is not a TCP port")
    for name in ("connect_timeout_s", "upstream_timeout_s", "health_interval_s", "health_timeout_s"):
        if getattr(cfg, name) <= 0:
            raise ConfigError(f"{name}: must be > 0")
    for url in cfg.hot + cfg.cold:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"hot/cold: {url!r} is not an http:// or https:// URL")


def load_config(path: Path | None, base: RouterConfig | None = None) -> RouterConfig:
    """Read router.toml (a missing file is an error; None = defaults)."""
    if path is None:
        cfg = base or RouterConfig()
        validate(cfg)
        return cfg
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return config_from_dict(doc, base)
