"""Generates the pkb.v1 stubs from proto/ (grpcio-tools) and copies the candidate headers and a
worked example into pkb/data/, then lets setuptools package them. Everything comes from the PKB
checkout that holds proto/ (PKB_PROTO_DIR, else ../../proto)."""
import os
import pathlib

from setuptools import setup

HERE = pathlib.Path(__file__).resolve().parent


def proto_dir() -> pathlib.Path:
    found = os.environ.get("PKB_PROTO_DIR") or str(HERE.parent.parent / "proto")
    path = pathlib.Path(found)
    if not (path / "pkb" / "v1" / "evaluation.proto").is_file():
        raise SystemExit(
            f"pkb-client: no pkb/v1/*.proto under {path}; build from a PKB checkout "
            "or set PKB_PROTO_DIR to its proto/ folder")
    return path


def generate_stubs() -> None:
    import grpc_tools
    from grpc_tools import protoc

    src = proto_dir()
    protos = sorted(str(p) for p in (src / "pkb" / "v1").glob("*.proto"))
    well_known = pathlib.Path(grpc_tools.__file__).parent / "_proto"
    args = ["grpc_tools.protoc", f"-I{src}", f"-I{well_known}", f"--python_out={HERE}",
            f"--pyi_out={HERE}", f"--grpc_python_out={HERE}", *protos]
    if protoc.main(args) != 0:
        raise SystemExit("pkb-client: protoc failed on " + " ".join(protos))
    (HERE / "pkb" / "v1" / "__init__.py").write_text(
        '"""Generated from proto/pkb/v1 at build time; do not edit."""\n')


def copy_agent_data() -> None:
    """include/pkb/* and one worked candidate, for prompts (pkb.agent) and the MCP server."""
    import shutil

    repo = proto_dir().parent
    headers = ("candidate.h", "device.cuh", "aten_core.h", "aten.h")
    wanted = [repo / "include" / "pkb" / h for h in headers]
    wanted.append(repo / "problems" / "examples" / "p001_allreduce_symm.cu")
    data = HERE / "pkb" / "data"
    data.mkdir(exist_ok=True)
    for f in wanted:
        if not f.is_file():
            raise SystemExit(f"pkb-client: {f} is missing; build from a PKB checkout")
        shutil.copyfile(f, data / f.name)


# Before setup(): metadata and sdist steps already look for the pkb.v1 package.
generate_stubs()
copy_agent_data()
setup()
