"""A real etcd (Debian's etcd-server) on loopback for the leader-election tests, and a TCP proxy in front of it
that a test can cut to partition one replica from the store. The tests fail (never skip) without etcd:
scripts/ensure-debian-packages.sh installs it."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.serve.stack import wait_for
from trials.live import free_port


def etcd_binary() -> str:
    found = shutil.which("etcd") or ("/usr/bin/etcd" if Path("/usr/bin/etcd").exists() else None)
    if found is None:
        pytest.fail("etcd is not installed: run `make test` (scripts/ensure-debian-packages.sh installs Debian's "
                    "etcd-server)")
    return found


class EtcdServer:
    """One etcd member with its own data directory and ports (kept across a kill and a start again)."""

    def __init__(self, work: Path) -> None:
        work.mkdir(parents=True, exist_ok=True)
        self.work = work
        client, peer = free_port(), free_port()
        self.url, self.peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> EtcdServer:
        cmd = [etcd_binary(), "--name", "t", "--data-dir", str(self.work / "etcd-data"), "--listen-client-urls",
               self.url, "--advertise-client-urls", self.url, "--listen-peer-urls", self.peer_url,
               "--initial-advertise-peer-urls", self.peer_url, "--initial-cluster", f"t={self.peer_url}",
               "--log-level", "warn"]
        log = self.work / "etcd.log"
        with open(log, "ab") as out:
            proc = self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)

        def ready() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"etcd exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            return httpx.post(self.url + "/v3/kv/range", json={"key": "eA=="}, timeout=2, trust_env=False).is_success

        try:
            wait_for("etcd to answer", ready, timeout_s=60)
        except BaseException:
            self.kill()
            raise
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(15)


@contextmanager
def etcd_server(work: Path) -> Iterator[EtcdServer]:
    server = EtcdServer(work).start()
    try:
        yield server
    finally:
        server.kill()


@contextmanager
def etcd(work: Path) -> Iterator[str]:
    """A real etcd on loopback; yields its client URL; killed after."""
    with etcd_server(work) as server:
        yield server.url


class Proxy:
    """A loopback TCP proxy to `upstream` (host, port). `cut()` partitions: what is in flight is never answered
    and new connections are taken but never forwarded (requests hang until the client's timeout); `heal()`."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.cut_now = False
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._held: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="etcd-proxy").start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if self.cut_now:
                    self._held.append(conn)
                    continue
            try:
                up = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                conn.close()
                continue
            with self._lock:
                self._pairs.append((conn, up))
            for src, dst in ((conn, up), (up, conn)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if self.cut_now:
                    return
                dst.sendall(data)
        if not self.cut_now:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        with self._lock:
            self.cut_now = True
            for client, up in self._pairs:  # the store's side goes; the replica's side is left hanging
                with contextlib.suppress(OSError):
                    up.close()
                self._held.append(client)
            self._pairs.clear()

    def heal(self) -> None:
        with self._lock:
            self.cut_now = False
            for s in self._held:
                with contextlib.suppress(OSError):
                    s.close()
            self._held.clear()

    def close(self) -> None:
        self._closed = True
        self.heal()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            for pair in self._pairs:
                for s in pair:
                    with contextlib.suppress(OSError):
                        s.close()
            self._pairs.clear()


@contextmanager
def proxy_to(url: str) -> Iterator[Proxy]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    p = Proxy((host, int(port)))
    try:
        yield p
    finally:
        p.close()
