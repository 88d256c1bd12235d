"""pkb-mcp through the official MCP client (the `mcp` package), over stdio and streamable HTTP,
against a live coordinator and worker (conftest.py)."""
import json
import os
import pathlib
import subprocess
import sys
import time

import anyio
import pytest
from mcp import Client, StdioServerParameters

import pkb

TOOLS = {"list_problems", "get_problem", "check_candidate", "submit", "get_result",
         "explain_result", "leaderboard"}


def _env(**extra) -> dict:
    """The installed SDK (PYTHONPATH, as run_tests.sh sets it) for the server's process."""
    env = {"PYTHONPATH": os.environ.get("PYTHONPATH", ""), "PATH": os.environ.get("PATH", "")}
    env.update(extra)
    return env


def _stdio(target: str, token: str = "") -> StdioServerParameters:
    args = ["-m", "pkb.mcp_server", "--coordinator", target]
    return StdioServerParameters(command=sys.executable, args=args,
                                 env=_env(PKB_TOKEN=token) if token else _env())


async def _call(client: Client, tool: str, progress=None, **args) -> dict:
    res = await client.call_tool(tool, args, progress_callback=progress)
    text = "".join(c.text for c in res.content if c.type == "text")
    if res.is_error:
        raise AssertionError(f"{tool} failed: {text}")
    return json.loads(text)


async def _error(client: Client, tool: str, **args) -> str:
    res = await client.call_tool(tool, args)
    assert res.is_error, f"{tool} did not fail"
    return "".join(c.text for c in res.content if c.type == "text")


def test_a_whole_agent_session_over_stdio(cluster):
    async def session():
        async with Client(_stdio(cluster.target)) as c:
            assert {t.name for t in (await c.list_tools()).tools} == TOOLS

            problems = await _call(c, "list_problems")
            assert [p["slug"] for p in problems["problems"]] == ["1_allreduce", "2_allgather"]
            assert problems["problems"][0]["world_sizes"] == [1, 2, 4, 8]

            spec = await _call(c, "get_problem", problem="1_allreduce", world_size=2)
            assert spec["id"] == 1 and "All-reduce" in spec["statement"]
            (layout,) = spec["layouts"]
            rank = layout["ranks"][0]
            assert rank["inputs"][0] == {"abi": "inputs[0]", "name": "x", "shape": [8192, 8192],
                                         "dtype": "bfloat16", "pkb_dtype": "PKB_BFLOAT16",
                                         "note": "filled with rank + 1"}
            assert rank["scalars"] == [
                {"abi": "args[0].f", "name": "scale", "kind": "float",
                 "pkb_kind": "PKB_SCALAR_FLOAT", "value": 0.5},
                {"abi": "args[1].i", "name": "chunks", "kind": "int",
                 "pkb_kind": "PKB_SCALAR_INT", "value": 4}]
            assert rank["outputs"][0]["abi"] == "outputs[0]"
            assert layout["ranks_note"] == "every rank has rank 0's signature"
            # 2 (W-1)/W of 128 MiB over 450 GB/s beats 384 MiB over 4.3 TB/s.
            assert layout["roofline_floor_us"] == pytest.approx(134217728 / 450e9 * 1e6, abs=1e-3)
            assert spec["tolerances"] == [{"output": "out", "atol": 0.01, "rtol": 0.01,
                                           "exact": False, "reason": "bf16 sum of W terms"}]
            assert spec["reference_us"] == []  # nothing has run yet
            assert "headers" not in spec
            unsupported = await _call(c, "get_problem", problem=1, world_size=3)
            assert unsupported["layouts"][0]["unsupported_reason"] == \
                "m must divide by the world size"
            # Problem 2 declares the shapes ranked runs are also timed at; problem 1 (a catalog
            # of before) none.
            shaped = await _call(c, "get_problem", problem=2, world_size=2)
            assert shaped["layouts"][0]["ranked_shapes"]["m"] == {"min": 2048, "max": 8192,
                                                                  "step": 1024}
            assert shaped["layouts"][0]["ranked_shapes"]["n"] == {"min": 1024, "max": 1024,
                                                                  "step": 1}
            assert "ranked_shapes" not in layout
            full = await _call(c, "get_problem", problem="1", include_headers=True)
            assert "pkb_run_fn" in full["headers"]["pkb/candidate.h"]
            assert "PKB_CANDIDATE_API_V1" in full["example"]["source"]
            assert [l["world_size"] for l in full["layouts"]] == [1, 2, 3, 4, 8]

            # compile (the default): a compile task on the worker (the test double's
            # --compile-only answers COMPILED, or COMPILE_ERROR for FAKE_COMPILE_ERROR).
            check = await _call(c, "check_candidate", problem=1, source="int main() {}",
                                world_size=2)
            assert (check["checked"], check["compiled"], check["verdict"],
                    check["compile_verdict"]) == (True, True, "POLICY_OK", "COMPILED")
            assert check["compiled_by"] == "w1"
            assert any("pkb_run" in f for f in check["local_findings"])
            broken = await _call(c, "check_candidate", problem=1, world_size=2,
                                 source="FAKE_COMPILE_ERROR\nint f() { return 0 }\n")
            assert (broken["compiled"], broken["compile_verdict"]) == (False, "COMPILE_ERROR")
            assert broken["compile"]["diagnostics"][0]["line"] == 3
            quick = await _call(c, "check_candidate", problem=1, source="int main() {}",
                                world_size=2, compile=False)
            assert (quick["compiled"], quick["compile_verdict"]) == \
                (False, "COMPILE_VERDICT_UNSPECIFIED")
            policy = await _call(c, "check_candidate", problem=1, world_size=2,
                                 source='int f() { return getenv("SEED") != 0; }')
            assert policy["verdict"] == "POLICY"
            assert any("environment" in str(f) for f in policy["policy_findings"])
            good = await _call(c, "check_candidate", problem=1, world_size=2,
                               source=full["example"]["source"])
            assert good["local_findings"] == []

            seen = []

            async def progress(p, total, message):
                seen.append(message)
            bad = await _call(c, "submit", progress, problem="1_allreduce", world_size=2,
                              source="FAKE_COMPILE_ERROR")
            assert bad["status"] == "COMPILE_ERROR"
            assert "candidate.cu:3:0: error: expected ;" in bad["feedback"]
            assert seen[0].startswith("QUEUED") and seen[-1] == "DONE: COMPILE_ERROR"
            why = await _call(c, "explain_result", job_id=bad["job_id"])
            assert why["summary"].startswith("COMPILE_ERROR: The source did not compile")
            assert "candidate.cu:3: error: expected ;" in why["facts"]

            seen.clear()
            ok = await _call(c, "submit", progress, problem=1, world_size=2, model="m1",
                             source="FAKE_OK FAKE_SPEEDUP=2.0", tags=["mcp"])
            assert (ok["status"], ok["speedup"]) == ("OK", 2.0)
            assert any(m.startswith("VERIFYING") for m in seen) and "BENCHMARKING" in seen
            assert ok["result"]["candidate"]["per_rank_median_us"] == [7.5, 7.5]
            # Zero is a value: rank 0 and trial 0 say so (proto3 JSON would drop them).
            assert ok["result"]["roofline"] == {
                "nvlink_bytes": 0.0, "hbm_bytes": 0.0, "flops": 0.0, "algbw_gbps": 0.0,
                "busbw_gbps": 0.0, "percent_of_roofline": pytest.approx(66.6667), "floor_us": 5.0}
            assert (ok["result"]["m"], ok["result"]["cached"]) == (0, False)
            assert "per-rank medians 7.50 7.50 us" in ok["feedback"]
            assert "roofline floor 5.00 us" in ok["feedback"]
            why = await _call(c, "explain_result", job_id=ok["job_id"])
            assert "Speedup 2.00x" in why["summary"] and "66.7% of it reached" in why["summary"]
            again = await _call(c, "get_result", job_id=ok["job_id"])
            assert again["status"] == "OK" and again["result"] == ok["result"]

            later = await _call(c, "submit", problem=1, world_size=2, wait=False,
                                source="FAKE_OK FAKE_SPEEDUP=1.25 FAKE_DELAY=0.3")
            assert later["status"] == "PENDING" and later["job_id"]
            pending = await _call(c, "get_result", job_id=later["job_id"])
            assert pending["status"] == "PENDING"
            assert (await _call(c, "explain_result", job_id=later["job_id"]))["status"] == \
                "PENDING"
            done = await _call(c, "get_result", job_id=later["job_id"], wait=True)
            assert (done["status"], done["speedup"]) == ("OK", 1.25)

            board = await _ranked_board(c, problem="1_allreduce", world_size=2)
            entries = board["boards"][0]["entries"]
            assert [(e["speedup"], e["model"]) for e in entries] == [(2.0, "m1")]
            spec = await _call(c, "get_problem", problem=1, world_size=2)
            # The baselines of the OK results at W = 2 (the test double's 15 us per call).
            times = spec["reference_us"]
            assert [(t["world_size"], t["median_us"]) for t in times] == [(2, 15)]
            assert times[0]["samples"] >= 2 and times[0]["p10_us"] == times[0]["p90_us"] == 15
            assert spec["source"] == [{"path": "problems/collectives/p001_allreduce.cc",
                                       "text": "// the test double's problem 1"}]
            lean = await _call(c, "get_problem", problem=1, world_size=2, include_source=False)
            assert "source" not in lean

            assert "NOT_FOUND" in await _error(c, "get_result", job_id="no-such-job")
            assert "NOT_FOUND" in await _error(c, "get_problem", problem="nope")
            assert "INVALID_ARGUMENT" in await _error(c, "submit", problem=1, world_size=3,
                                                      source="FAKE_OK")
            assert "by must be" in await _error(c, "leaderboard", by="team")
    anyio.run(session)


async def _ranked_board(client, **query):
    """The leaderboard tool's answer once its first board has a ranked entry: a result ranks once
    its confirmation run (the service times it again) is done, a moment with the test engine."""
    for _ in range(200):
        board = await _call(client, "leaderboard", **query)
        if board["boards"] and board["boards"][0].get("entries"):
            return board
        await anyio.sleep(0.05)
    return board


def test_streamable_http_with_an_agent_token(cluster_factory, tmp_path):
    c = cluster_factory(tokens="ag agent alice\nwk worker w1 gpu_class=cpu max_world_size=8\n",
                        worker_token="wk")
    (tmp_path / "agent.token").write_text("ag\n")
    port_file = tmp_path / "mcp.port"
    log = open(tmp_path / "mcp.log", "wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "pkb.mcp_server", "--coordinator", c.target, "--token-file",
         str(tmp_path / "agent.token"), "--transport", "http", "--port", "0",
         "--port-file", str(port_file)], stdout=log, stderr=subprocess.STDOUT, env=_env())
    try:
        for _ in range(500):
            if port_file.exists() or server.poll() is not None:
                break
            time.sleep(0.02)
        assert port_file.exists(), (tmp_path / "mcp.log").read_text()
        url = f"http://127.0.0.1:{port_file.read_text().strip()}/mcp"

        async def session():
            async with Client(url) as mc:
                assert {t.name for t in (await mc.list_tools()).tools} == TOOLS
                seen = []

                async def progress(p, total, message):
                    seen.append(message)
                ok = await _call(mc, "submit", progress, problem=1, world_size=2,
                                 source="FAKE_OK FAKE_SPEEDUP=3.0", model="m-http")
                assert ok["status"] == "OK" and seen[-1] == "DONE: OK"
                # An agent token reads boards.
                board = await _ranked_board(mc, problem=1)
                entry = board["boards"][0]["entries"][0]
                assert (entry["submitter"], entry["model"], entry["speedup"]) == \
                    ("alice", "m-http", 3.0)
        anyio.run(session)
    finally:
        server.terminate()
        server.wait(10)
        log.close()
    # The job was the token's: submitted as alice whatever the request said.
    with pkb.Client(c.target, token="ag") as sdk:
        # Its confirmation run (the service's own re-timing) is listed too, as alice's.
        (mine,) = [s for s in sdk.submissions() if not s.confirms_job_id]
        assert mine.submitter == "alice" and mine.agent == "pkb-mcp"


def test_the_server_says_what_is_missing(tmp_path):
    bad = subprocess.run([sys.executable, "-m", "pkb.mcp_server", "--token-file",
                          str(tmp_path / "none")], capture_output=True, text=True, env=_env())
    assert bad.returncode == 2 and "--token-file" in bad.stderr


def test_local_findings_take_any_header_of_the_api():
    from pkb.mcp_server import local_findings
    body = ("PKB_CANDIDATE_API_V1;\nextern \"C\" int pkb_run(pkb_context*, const pkb_tensor*, "
            "int, const pkb_scalar*, int, pkb_tensor*, int) { return 0; }\n")
    for header in ("pkb/candidate.h", "pkb/aten_core.h", "pkb/aten.h"):
        assert local_findings(f"#include <{header}>\n" + body) == [], header
    assert local_findings(body) == ["no #include <pkb/candidate.h>"]
