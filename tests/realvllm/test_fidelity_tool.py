"""sim.fidelity without real vLLM (runs even when the tier is skipped), and the tier's cache key."""

from __future__ import annotations

import io
import os
import socket
import subprocess

import pytest
from realserver import DIR_ENV, REPO, default_tier_dir

from sim.fidelity import EXIT_ERROR, EXIT_SAME, Family, compare_families, families, main, nearest_profile
from sim.testing import engine_thread

PAGE = """\
# HELP vllm:num_requests_running Number of requests.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 0.0
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 3.0
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{engine="0",le="1.0",model_name="m"} 0.0
vllm:iteration_tokens_total_bucket{engine="0",le="+Inf",model_name="m"} 2.0
vllm:iteration_tokens_total_count{engine="0",model_name="m"} 2.0
vllm:iteration_tokens_total_sum{engine="0",model_name="m"} 9.0
# TYPE http_requests_total counter
http_requests_total{handler="/v1/completions",method="POST",status="2xx"} 1.0
"""


def test_families_are_read_by_name_type_and_label_names() -> None:
    fams = families(PAGE)
    assert set(fams) == {"vllm:num_requests_running", "vllm:request_success", "vllm:iteration_tokens_total"}
    assert fams["vllm:request_success"] == Family("vllm:request_success", "counter",
                                                  frozenset({"engine", "finished_reason", "model_name"}))
    assert fams["vllm:iteration_tokens_total"].type == "histogram"
    assert "le" not in fams["vllm:iteration_tokens_total"].labels


def test_differences_are_classified_and_known_ones_marked() -> None:
    real = families(PAGE)
    sim = dict(real)
    del sim["vllm:num_requests_running"]
    sim["vllm:iteration_tokens_total"] = Family("vllm:iteration_tokens_total", "counter", frozenset())
    sim["vllm:request_success"] = Family("vllm:request_success", "counter", frozenset({"engine", "model_name"}))
    sim["vllm:extra"] = Family("vllm:extra", "gauge", frozenset())
    same, diffs = compare_families(real, sim, {"vllm:extra": "the sim's own"})
    assert same == 0
    kinds = {d.family: d.kind for d in diffs}
    assert kinds == {"vllm:num_requests_running": "only_real", "vllm:iteration_tokens_total": "type",
                     "vllm:request_success": "labels", "vllm:extra": "only_sim"}
    extra = next(d for d in diffs if d.family == "vllm:extra")
    assert extra.known == "the sim's own" and "[known: the sim's own]" in extra.describe()
    labels = next(d for d in diffs if d.family == "vllm:request_success")
    assert "real only: finished_reason" in labels.describe()


@pytest.mark.parametrize(("version", "profile"), [
    ("0.32.0", "0.32"), ("0.32.1rc2", "0.32"), ("v0.33.0", "0.33"), ("0.31.2", "0.26"), ("0.10.2", "0.10"),
    ("0.9.2", "0.8"), ("0.5.0", "0.6"), ("1.2.0", "0.33"),
])
def test_nearest_profile(version: str, profile: str) -> None:
    assert nearest_profile(version) == profile


def test_the_sim_against_itself_has_no_differences() -> None:
    with engine_thread(["m", "--vllm-version", "0.33"]) as eng:
        out, err = io.StringIO(), io.StringIO()
        code = main(["--against", eng.url], out=out, err=err)
    assert code == EXIT_SAME, out.getvalue() + err.getvalue()
    assert "no differences" in out.getvalue() and "version profile 0.33" in out.getvalue()


def test_unreachable_server_and_bad_version_are_clear_errors() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out, err = io.StringIO(), io.StringIO()
    assert main(["--against", f"http://127.0.0.1:{port}"], out=out, err=err) == EXIT_ERROR
    assert "cannot read" in err.getvalue() and "Traceback" not in err.getvalue()
    with engine_thread(["m"]) as eng:
        err = io.StringIO()
        assert main(["--against", eng.url, "--vllm-version", "banana"], out=out, err=err) == EXIT_ERROR
    assert "cannot read a vLLM release from 'banana'" in err.getvalue()


def test_the_cache_folder_is_the_one_make_names() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("REALVLLM_DIR", DIR_ENV, "MAKEFLAGS", "MAKELEVEL")}
    r = subprocess.run(["make", "-s", "--no-print-directory", "realvllm-dir"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(default_tier_dir())
