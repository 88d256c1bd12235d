"""The SDK's wheel, as the build ships it (build/client/python/dist; PKB_WHEEL), installs with pip
into a fresh virtual environment and works there without a checkout: stubs, headers, pkb-mcp."""
import os
import pathlib
import subprocess
import sys
import zipfile

import pytest


@pytest.fixture
def wheel() -> pathlib.Path:
    path = os.environ.get("PKB_WHEEL")
    if not path or not pathlib.Path(path).is_file():
        pytest.fail(f"PKB_WHEEL={path!r} is not a file (run_tests.sh sets it; ninja builds it: "
                    "pkb_python_wheel)")
    return pathlib.Path(path)


def test_the_wheel_holds_the_stubs_and_the_headers(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for want in ("pkb/client.py", "pkb/agent.py", "pkb/mcp_server.py", "pkb/v1/__init__.py",
                 "pkb/v1/evaluation_pb2.py", "pkb/v1/evaluation_pb2_grpc.py",
                 "pkb/v1/problem_pb2.pyi", "pkb/data/candidate.h", "pkb/data/device.cuh",
                 "pkb/data/aten_core.h", "pkb/data/aten.h", "pkb/data/p001_allreduce_symm.cu"):
        assert want in names, f"{want} is not in {wheel.name}"
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "pkb-mcp = pkb.mcp_server:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_pip_installs_the_wheel_into_a_fresh_venv(wheel, tmp_path, cluster):
    venv = tmp_path / "venv"
    # The venv sees the system's packages (grpcio, protobuf, mcp: scripts/install-deps.sh), never
    # the checkout or the test's install of the SDK.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True)
    py = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-index", str(wheel)],
                   check=True, env=env, cwd=tmp_path)
    probe = ("import pathlib, sys, pkb, pkb.agent\n"
             "assert pathlib.Path(pkb.__file__).is_relative_to(sys.prefix), pkb.__file__\n"
             "assert 'pkb_run_fn' in pkb.agent.header('candidate.h')\n"
             f"with pkb.Client('{cluster.target}') as c:\n"
             "    print(' '.join(p.slug for p in c.problems()))\n")
    out = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, env=env,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1_allreduce", "2_allgather"]
    helped = subprocess.run([str(venv / "bin" / "pkb-mcp"), "--help"], capture_output=True,
                            text=True, env=env, cwd=tmp_path)
    assert helped.returncode == 0, helped.stderr
    assert "--transport" in helped.stdout
