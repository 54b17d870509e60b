"""Canonical names and version-profile detection, against sim-rendered scrapes of every profile."""

from __future__ import annotations

from pathlib import Path

import pytest

import sim.profiles
from collectors.names import PROFILE_NAMES, detect_profile, profile_for_version
from collectors.scrape import has_engine_label, parse_metrics
from sim.exposition import render_metrics
from sim.stats import new_metrics_state

FIXTURES = Path(__file__).parent / "fixtures"
# Without /version the names cannot tell 0.26, 0.32 and 0.33 apart: the oldest matching profile is reported.
BY_NAMES = {"0.6": "0.6", "0.8": "0.8", "0.10": "0.10", "0.10-v0": "0.10-v0", "0.11": "0.11", "0.12": "0.12",
            "0.20": "0.20", "0.26": "0.26", "0.32": "0.26", "0.33": "0.26"}


def test_one_list_of_profiles() -> None:
    assert PROFILE_NAMES == sim.profiles.PROFILE_NAMES
    assert set(BY_NAMES) == set(PROFILE_NAMES)


def _scrape(name: str, *, stats: bool = True):  # type: ignore[no-untyped-def]
    profile = sim.profiles.get_profile(name)
    state = new_metrics_state(profile, 8192, 1_790_000_000.0)
    return profile, parse_metrics(render_metrics(profile, state, model_name="m", stats_enabled=stats).decode(), 1.0)


@pytest.mark.parametrize("name", PROFILE_NAMES)
def test_detect_profile_on_sim_scrapes(name: str) -> None:
    profile, snap = _scrape(name)
    label = has_engine_label(snap)
    assert label is profile.engine_label
    with_version = detect_profile(profile.version, snap.names_seen, has_engine_label=label)
    assert with_version.profile == name, with_version
    assert with_version.engine_generation == ("v1" if profile.v1 else "v0")
    by_names = detect_profile(None, snap.names_seen, has_engine_label=label)
    assert by_names.profile == BY_NAMES[name], by_names


@pytest.mark.parametrize("name", ["0.6", "0.10", "0.33"])
def test_stats_disabled_is_not_guessed(name: str) -> None:
    profile, snap = _scrape(name, stats=False)
    assert detect_profile(None, snap.names_seen, has_engine_label=has_engine_label(snap)).profile is None
    assert detect_profile(profile.version, snap.names_seen, has_engine_label=None).profile == name.split("-")[0]


@pytest.mark.parametrize(("version", "want"), [
    ("0.6", "0.6"), ("0.8", "0.8"), ("0.10", "0.10"), ("0.11", "0.11"), ("0.12", "0.12"), ("0.20", "0.20"),
    ("0.33", "0.26"),
])
def test_detect_profile_on_hand_written_fixtures(version: str, want: str) -> None:
    snap = parse_metrics((FIXTURES / f"metrics_{version}_b.txt").read_text(), 1.0)
    assert detect_profile(None, snap.names_seen, has_engine_label=has_engine_label(snap)).profile == want


def test_profile_for_version() -> None:
    assert profile_for_version("0.9.2") == "0.8"
    assert profile_for_version("0.10.2") == "0.10"
    assert profile_for_version("v0.11.0") == "0.11"
    assert profile_for_version("0.11.1rc2") == "0.11"
    assert profile_for_version("0.15.0") == "0.12"
    assert profile_for_version("0.25.0") == "0.20"
    assert profile_for_version("0.33.0") == "0.33"
    assert profile_for_version("1.0.0") == "0.33"
    assert profile_for_version("0.6.6.post1") == "0.6"
    assert profile_for_version("0.5.3") is None
    assert profile_for_version("dev") is None
    detection = detect_profile("0.10.2", frozenset({"vllm:num_requests_swapped", "vllm:num_requests_running"}),
                               has_engine_label=False)
    assert detection.profile == "0.10-v0"
