"""The policy document, its bounds, its store (versions, history, file) and the router's config file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from router.cli import main
from router.config import ConfigError, load_config
from router.policy import Policy, PolicyError, check_limits, diff, initial_policy, parse_policy
from router.store import PolicyStore

NOW = 1_900_000_000.0


def _doc(**extra: object) -> dict[str, object]:
    doc = initial_policy(["http://h:1"], ["http://c:2"]).to_dict()
    doc.update(extra)
    return doc


def test_round_trip_and_defaults() -> None:
    p = parse_policy(_doc(), now=NOW)
    assert p == initial_policy(["http://h:1"], ["http://c:2"])
    assert parse_policy(p.to_dict(), now=NOW) == p
    iso = parse_policy(_doc(length_limit_tokens=10, length_limit_expires_at="2030-01-01T00:00:00Z"), now=NOW)
    assert iso.length_limit_expires_at == 1893456000.0
    assert iso.length_limit_active(1893455999.0) and not iso.length_limit_active(1893456000.0)


@pytest.mark.parametrize(("extra", "word"), [
    ({"batch_timeout_ms": 1001}, "0..1000"), ({"batch_timeout_ms": True}, "integer"),
    ({"route_threshold_tokens": 0}, "route_threshold_tokens"), ({"max_queue": -1}, "max_queue"),
    ({"length_limit_expires_at": NOW + 5}, "without length_limit_tokens"),
    ({"upstreams": {"hot": [{"url": "http://a", "name": "x"}, {"url": "http://b", "name": "x"}]}}, "twice"),
    ({"upstreams": {"warm": []}}, "unknown role"), ({"upstreams": {"hot": [{"url": "http://a", "x": 1}]}}, "x"),
])
def test_bad_documents_name_the_field(extra: dict[str, object], word: str) -> None:
    with pytest.raises(PolicyError) as exc:
        parse_policy(_doc(**extra), now=NOW)
    assert word in str(exc.value)


def test_limits_against_max_model_len_and_expiry() -> None:
    p = parse_policy(_doc(route_threshold_tokens=5000), now=NOW)
    check_limits(p, {"hot": 8192, "cold": 32768}, now=NOW)
    with pytest.raises(PolicyError, match="hot engine's max_model_len"):
        check_limits(p, {"hot": 4096}, now=NOW)
    past = parse_policy(_doc(length_limit_tokens=10, length_limit_expires_at=NOW - 1), now=NOW)
    with pytest.raises(PolicyError, match="already past"):
        check_limits(past, {}, now=NOW)
    check_limits(past, {}, now=NOW, previous=past)  # unchanged from GET: accepted, simply inactive


def test_store_versions_history_and_file(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    clock = [NOW]
    store = PolicyStore(Policy(), path, clock=lambda: clock[0])
    assert store.load() is None and store.version == 1
    new = parse_policy(_doc(batch_timeout_ms=100), now=NOW)
    entry = store.apply(new, "test")
    assert entry["version"] == 2 and any("batch_timeout_ms: 0 -> 100" in c for c in entry["changes"])
    assert store.apply(new, "test")["changes"] == [] and store.version == 2
    again = PolicyStore(Policy(), path, clock=lambda: clock[0])
    assert again.load() is None and again.version == 2 and again.policy == new
    assert [h["version"] for h in again.history] == [1, 2]
    path.write_text("{broken")
    third = PolicyStore(Policy(), path, clock=lambda: clock[0])
    assert "unusable" in (third.load() or "") and third.version == 1
    assert not path.exists() and list(tmp_path.glob("p.json.unreadable-*"))
    assert diff(Policy(), Policy()) == []


def test_config_file_errors_name_the_key(tmp_path: Path) -> None:
    f = tmp_path / "router.toml"
    f.write_text('[router]\nport = 9000\ntoken_counter = "engine"\n[policy]\nbatch_timeout_ms = 100\n')
    cfg = load_config(f)
    assert (cfg.port, cfg.token_counter, cfg.batch_timeout_ms) == (9000, "engine", 100)
    for text, word in [("[router]\nprot = 1\n", "router.prot"), ('token_counter = "magic"\n', "token_counter"),
                       ("port = 'x'\n", "port"), ("hot = 'ftp://x'\n", "hot/cold"), ("= broken", "TOML")]:
        f.write_text(text)
        with pytest.raises(ConfigError, match=word):
            load_config(f)
    f.write_text('token_counter = "tokenizer"\ntokenizer_file = "/nonexistent.json"\n')
    assert main(["--config", str(f), "--hot", "http://h", "--policy-file", ""]) == 2


def test_cli_refuses_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--port", "x"]) == 2
    assert main(["--policy-file", ""]) == 2
    assert "no upstreams" in capsys.readouterr().err
    assert json.dumps(initial_policy([], []).to_dict())
