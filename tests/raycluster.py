"""A Ray cluster of several nodes on this machine, each started with ``ray start`` on loopback.

For the Ray executor's multi-node test and ``bench/bench_scale.py``. Every node is a real
``ray start --block`` process with its own raylet (the head's also runs the GCS); the driver joins
with ``--ray-address``. Two things make this work on one Linux machine with Ray 2.60:

- **Loopback addresses.** Ray replaces ``127.0.0.1`` and ``localhost`` given to ``ray start
  --node-ip-address`` (or ``--address``) by the machine's routable address on purpose (its
  issue 26293), so a node "on 127.0.0.1" binds eth0's address. Any other address of the
  loopback network is kept: the head is ``127.0.0.2``, the next nodes ``127.0.0.3``, ...
  (The processes still listen on every interface, as Ray's do; the token keeps strangers out.)
- **Token authentication.** Ray 2.60 turns token authentication on for a head started where a
  token exists (``~/.ray/auth_token``), while ``ray start --address`` on another node reads the
  mode from ``RAY_AUTH_MODE`` only: without it the second node fails with ``InvalidAuthToken``.
  Here every node and the driver get ``RAY_AUTH_MODE=token`` and a token file of the cluster's
  own (``RAY_AUTH_TOKEN_PATH``); the user's ``~/.ray`` is never touched.

::

    with LoopbackCluster(tmp_path, {"refaccel": 1}, nodes=2) as cluster:
        os.environ.update(cluster.env)       # the driver needs the token too
        run(..., executor=RayExecutor(address=cluster.address, ...))
        cluster.kill_node(1)                 # SIGKILL a worker node's raylet: the node is lost

Processes are stopped by the ids this helper started (SIGTERM to each ``ray start --block``,
which stops its node; SIGKILL to the process group after a grace), never with ``ray stop``,
which would stop every Ray on the machine.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

__all__ = ["LoopbackCluster"]

RAY = str(Path(sys.executable).with_name("ray"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class LoopbackCluster:
    """``nodes`` Ray nodes on 127.0.0.2, 127.0.0.3, ...; each declares ``resources`` and ``num_cpus``."""

    def __init__(self, root: Path, resources: dict[str, float], *, nodes: int = 2, num_cpus: int = 1,
                 start_timeout: float = 120.0):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.resources, self.count, self.num_cpus = resources, nodes, num_cpus
        self.start_timeout = start_timeout
        self.port = _free_port()
        # Ray's session folder holds its Unix sockets, whose paths may not exceed 107 bytes
        self.temp_dir = tempfile.mkdtemp(prefix="opm-ray-", dir="/tmp")
        token = self.root / "auth_token"
        token.write_text(secrets.token_hex(32))
        token.chmod(0o600)
        #: what every node and the driver need in their environment
        self.env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token), "RAY_USAGE_STATS_ENABLED": "0"}
        self.procs: list[subprocess.Popen[bytes]] = []
        self.ips = [f"127.0.0.{2 + i}" for i in range(nodes)]

    @property
    def address(self) -> str:
        return f"{self.ips[0]}:{self.port}"

    def __enter__(self) -> LoopbackCluster:
        try:
            for i in range(self.count):
                self._start(i)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def _start(self, i: int) -> None:
        common = ["--block", "--node-ip-address", self.ips[i], "--num-cpus", str(self.num_cpus),
                  "--resources", json.dumps(self.resources), "--object-store-memory", str(100 * 1024 * 1024)]
        if i == 0:
            cmd = [RAY, "start", "--head", "--port", str(self.port), "--include-dashboard=false",
                   "--dashboard-port", str(_free_port()), "--temp-dir", self.temp_dir, *common]
        else:
            cmd = [RAY, "start", "--address", self.address, *common]
        log = self.root / f"node{i}.log"
        with open(log, "wb") as fh:
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                                    env={**os.environ, **self.env})
        self.procs.append(proc)
        end = time.monotonic() + self.start_timeout
        while "Ray runtime started" not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > end:
                tail = log.read_text(errors="replace")[-1500:]
                raise RuntimeError(f"ray start of node {i} ({self.ips[i]}) failed:\n{tail}")
            time.sleep(0.2)

    def raylet_pid(self, i: int) -> int:
        """The raylet of node ``i`` (a child of its ``ray start`` process)."""
        parent = self.procs[i].pid
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                text = stat.read_text()
            except OSError:
                continue
            name = text[text.index("(") + 1 : text.rindex(")")]
            ppid = int(text[text.rindex(")") + 2 :].split()[1])
            if ppid == parent and name == "raylet":
                return int(stat.parent.name)
        raise LookupError(f"node {i} has no raylet")

    def kill_node(self, i: int) -> None:
        """The node is lost: SIGKILL its raylet (its actors and their workers die with it)."""
        os.kill(self.raylet_pid(i), signal.SIGKILL)

    def stop(self) -> None:
        for proc in reversed(self.procs):  # worker nodes first, the head last
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # ray start --block stops its node's processes
        for proc in reversed(self.procs):
            try:
                proc.wait(40)
            except subprocess.TimeoutExpired:
                pass
            try:  # whatever of the node outlived it (its own session: the ids this helper started)
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            if proc.poll() is None:
                proc.wait(10)
        self.procs.clear()
        shutil.rmtree(self.temp_dir, ignore_errors=True)
