"""The Kubernetes Lease backend against API exchanges (no API server runs here): each test replays the requests
the backend must make and the API server's answers, written from the coordination.k8s.io/v1 API reference (a
Lease's shape, `resourceVersion` optimistic concurrency: 409 Conflict on a stale write, 404 and 201 on create),
and fails on any request that differs from the exchange."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from doctor.config_leader import LeaderSettings
from doctor.leader.kube import KubeLeaseStore
from doctor.leader.setup import problem, store_for
from doctor.leader.store import Grant, LeaseError, LeaseLost

PATH = "/apis/coordination.k8s.io/v1/namespaces/serving/leases/serving-doctor"
CREATE = "/apis/coordination.k8s.io/v1/namespaces/serving/leases"
NOT_FOUND = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
             "message": 'leases.coordination.k8s.io "serving-doctor" not found', "reason": "NotFound",
             "details": {"name": "serving-doctor", "group": "coordination.k8s.io", "kind": "leases"}, "code": 404}
CONFLICT = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": 'Operation cannot be fulfilled on leases.coordination.k8s.io "serving-doctor": the object has '
                       "been modified; please apply your changes to the latest version and try again",
            "reason": "Conflict", "details": {"name": "serving-doctor", "group": "coordination.k8s.io",
                                               "kind": "leases"}, "code": 409}
FORBIDDEN = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Forbidden",
             "message": 'leases.coordination.k8s.io "serving-doctor" is forbidden: User '
                        '"system:serviceaccount:serving:doctor" cannot get resource "leases"', "code": 403}


def lease(holder: str | None, rv: str, *, transitions: int = 0, duration: int = 15,
          renew: str = "2026-12-02T05:00:00.000000Z") -> dict[str, Any]:
    return {"kind": "Lease", "apiVersion": "coordination.k8s.io/v1",
            "metadata": {"name": "serving-doctor", "namespace": "serving",
                         "uid": "0b6c5d4e-1f2a-4b3c-9d8e-7f6a5b4c3d2e",
                         "resourceVersion": rv, "creationTimestamp": "2026-12-02T04:00:00Z"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration,
                     "acquireTime": "2026-12-02T04:00:00.000000Z", "renewTime": renew,
                     "leaseTransitions": transitions}}


class Replay(httpx.AsyncBaseTransport):
    """Answers each request with the next exchange: (method, path, what the body must hold, status, answer)."""

    def __init__(self, exchanges: list[tuple[str, str, dict[str, Any] | None, int, dict[str, Any]]]) -> None:
        self.exchanges = list(exchanges)
        self.bodies: list[dict[str, Any]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert self.exchanges, f"unexpected request {request.method} {request.url.path}"
        method, path, holds, status, answer = self.exchanges.pop(0)
        assert (request.method, request.url.path) == (method, path)
        assert request.headers["authorization"] == "Bearer sa-token"
        if holds is not None:
            body = json.loads(request.content)
            self.bodies.append(body)
            for key, want in holds.items():
                got: Any = body
                for part in key.split("."):
                    got = got[part]
                assert got == want, f"{key}: {got!r} != {want!r}"
        return httpx.Response(status, json=answer)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def store(replay: Replay, clock: Clock | None = None) -> KubeLeaseStore:
    return KubeLeaseStore("https://10.96.0.1:443", namespace="serving", lease_name="serving-doctor",
                          token="sa-token", transport=replay, monotonic=clock or Clock(), wall=lambda: 1796187600.0)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_the_first_replica_creates_the_lease() -> None:
    replay = Replay([
        ("GET", PATH, None, 404, NOT_FOUND),
        ("POST", CREATE, {"spec.holderIdentity": "a", "spec.leaseDurationSeconds": 15, "spec.leaseTransitions": 0,
                          "metadata.name": "serving-doctor", "kind": "Lease"}, 201, lease("a", "101")),
    ])
    grant = run(store(replay).try_acquire("a", 15))
    assert grant == Grant("a", 0, 15, "101") and not replay.exchanges
    assert replay.bodies[0]["spec"]["renewTime"] == "2026-12-02T05:00:00.000000Z"  # MicroTime, UTC


def test_a_held_lease_is_taken_over_only_once_unchanged_for_its_duration_on_this_clock() -> None:
    clock = Clock()
    replay = Replay([
        ("GET", PATH, None, 200, lease("b", "200", transitions=3)),  # first sight: counts from now
        ("GET", PATH, None, 200, lease("b", "201", transitions=3)),  # b renewed: counts again from now
        ("GET", PATH, None, 200, lease("b", "201", transitions=3)),  # 14 s unchanged: not yet
        ("GET", PATH, None, 200, lease("b", "201", transitions=3)),  # 15 s unchanged: expired
        ("PUT", PATH, {"metadata.resourceVersion": "201", "spec.holderIdentity": "a", "spec.leaseTransitions": 4},
         200, lease("a", "202", transitions=4)),
    ])
    s = store(replay, clock)

    async def go() -> Grant | None:
        assert await s.try_acquire("a", 15) is None
        clock.now += 10
        assert await s.try_acquire("a", 15) is None
        clock.now += 14
        assert await s.try_acquire("a", 15) is None
        clock.now += 1
        return await s.try_acquire("a", 15)

    grant = run(go())
    assert grant == Grant("a", 4, 15, "202") and not replay.exchanges  # the fencing token: leaseTransitions


def test_of_two_replicas_writing_at_once_the_api_server_takes_one() -> None:
    replay = Replay([
        ("GET", PATH, None, 200, lease(None, "300", transitions=5)),  # released by its last holder
        ("PUT", PATH, {"metadata.resourceVersion": "300", "spec.holderIdentity": "a"}, 409, CONFLICT),
    ])
    assert run(store(replay).try_acquire("a", 15)) is None and not replay.exchanges


def test_renewal_writes_renew_time_and_a_lease_taken_over_is_lost() -> None:
    replay = Replay([
        ("GET", PATH, None, 200, lease("a", "400", transitions=2)),
        ("PUT", PATH, {"metadata.resourceVersion": "400", "spec.holderIdentity": "a",
                       "spec.renewTime": "2026-12-02T05:00:00.000000Z"}, 200, lease("a", "401", transitions=2)),
        ("GET", PATH, None, 200, lease("c", "405", transitions=3)),
        ("GET", PATH, None, 200, lease("a", "406", transitions=2)),
        ("PUT", PATH, {"metadata.resourceVersion": "406"}, 409, CONFLICT),
    ])
    s = store(replay)

    async def go() -> None:
        renewed = await s.renew(Grant("a", 2, 15, "400"))
        assert renewed.handle == "401"
        with pytest.raises(LeaseLost, match="held by 'c'"):
            await s.renew(renewed)
        with pytest.raises(LeaseLost, match="409 Conflict"):
            await s.renew(renewed)

    run(go())
    assert not replay.exchanges


def test_release_clears_the_holder_so_the_other_need_not_wait() -> None:
    replay = Replay([
        ("GET", PATH, None, 200, lease("a", "500", transitions=2)),
        ("PUT", PATH, {"metadata.resourceVersion": "500", "spec.holderIdentity": None,
                       "spec.leaseDurationSeconds": 1}, 200, lease(None, "501", transitions=2, duration=1)),
    ])
    run(store(replay).release(Grant("a", 2, 15, "500")))
    assert not replay.exchanges


def test_forbidden_names_the_rbac_the_service_account_needs() -> None:
    replay = Replay([("GET", PATH, None, 403, FORBIDDEN)])
    with pytest.raises(LeaseError, match=r"get, create and update on leases\.coordination\.k8s\.io"):
        run(store(replay).try_acquire("a", 15))


def test_in_a_pod_the_service_account_is_used_and_outside_one_api_url_is_required(tmp_path: Path) -> None:
    s = LeaderSettings(store="kubernetes")
    assert problem(s, {}, sa=tmp_path) is not None and "api_url" in str(problem(s, {}, sa=tmp_path))
    (tmp_path / "token").write_text("sa-token\n")
    (tmp_path / "namespace").write_text("serving\n")
    made = store_for(s, {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}, sa=tmp_path)
    assert isinstance(made, KubeLeaseStore) and made.path.endswith("/namespaces/serving/leases")
    assert made._client.headers["authorization"] == "Bearer sa-token"
    assert made._client.base_url.host == "10.96.0.1" and made._client.base_url.scheme == "https"
    run(made.aclose())


def test_doctor_serve_outside_a_pod_without_api_url_exits_3_saying_so(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from doctor.serve.main import main

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    (tmp_path / "doctor.toml").write_text(
        f'[doctor]\nstate_dir = "{tmp_path / "state"}"\n\n[serve.leader]\nstore = "kubernetes"\n\n'
        '[[engines]]\nname = "hot"\nurl = "http://127.0.0.1:9"\n')
    assert main(["--config", str(tmp_path / "doctor.toml")]) == 3
    err = capsys.readouterr().err
    assert "no api_url and not in a pod" in err and "Traceback" not in err
