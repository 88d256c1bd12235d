"""A live coordinator and worker for the SDK tests: the built pkb-coordinator and pkb-worker on
loopback, SQLite in a temp dir, and tests/service/fake_pkb_eval.sh as the engine (as service_test
does). Paths come from the environment (CTest sets them; see client/python/CMakeLists.txt)."""
import os
import pathlib
import subprocess
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]


def _need(var: str, default: pathlib.Path) -> str:
    path = os.environ.get(var) or str(default)
    if not os.path.exists(path):
        pytest.fail(f"{var}: {path} does not exist (build it, or set {var})")
    return path


class Cluster:
    def __init__(self, tmp: pathlib.Path, tokens: str = ""):
        build = REPO / os.environ.get("PKB_BUILD_DIR", "build")
        self.coordinator_bin = _need("PKB_COORDINATOR_BIN", build / "server/pkb-coordinator")
        self.worker_bin = _need("PKB_WORKER_BIN", build / "worker/daemon/pkb-worker")
        self.engine = _need("PKB_FAKE_ENGINE", REPO / "tests/service/fake_pkb_eval.sh")
        self.tmp = tmp
        self.procs = []
        args = [self.coordinator_bin, "--listen", "127.0.0.1:0", "--db", str(tmp / "jobs.db"),
                "--engine", self.engine, "--heartbeat-interval", "0.2", "--lease-timeout", "2",
                "--port-file", str(tmp / "port"), "--reference-times-ttl", "0"]
        if tokens:
            (tmp / "tokens").write_text(tokens)
            args += ["--tokens", str(tmp / "tokens")]
        self._start(args, "coordinator.log")
        for _ in range(500):
            if (tmp / "port").exists() and (tmp / "port").read_text().strip():
                break
            time.sleep(0.02)
        self.port = int((tmp / "port").read_text())
        self.target = f"127.0.0.1:{self.port}"

    def _start(self, args, log):
        out = open(self.tmp / log, "ab")
        env = dict(os.environ, FAKE_PKB_EVAL_DELAY="0.01",
                   FAKE_PKB_EVAL_LOG=str(self.tmp / "engine_runs.log"))
        self.procs.append(subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env))

    def start_worker(self, worker_id="w1", token=""):
        args = [self.worker_bin, "--coordinator", self.target, "--worker-id", worker_id,
                "--engine", self.engine, "--scratch", str(self.tmp), "--gpu-class", "cpu"]
        if token:
            (self.tmp / f"{worker_id}.token").write_text(token + "\n")
            args += ["--token-file", str(self.tmp / f"{worker_id}.token")]
        self._start(args, f"worker-{worker_id}.log")

    def stop(self):
        for p in reversed(self.procs):
            p.kill()
            p.wait()


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    c.start_worker()
    yield c
    c.stop()


@pytest.fixture
def cluster_factory(tmp_path):
    made = []

    def make(tokens="", worker_token=""):
        c = Cluster(tmp_path, tokens)
        c.start_worker(token=worker_token)
        made.append(c)
        return c
    yield make
    for c in made:
        c.stop()
