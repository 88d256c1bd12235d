"""The SDK against a live coordinator (see conftest.py)."""
import csv
import importlib.util
import io
import pathlib
import threading
import time

import grpc
import pytest

import pkb
from pkb.v1 import result_pb2

REPO = pathlib.Path(__file__).resolve().parents[3]


def test_problems_and_spec(cluster):
    with pkb.Client(cluster.target) as c:
        listed = c.problems()
        assert [p.slug for p in listed] == ["1_allreduce", "2_allgather"]
        assert not listed[0].sources  # the listing leaves the code out; GetProblem has it
        spec = c.problem("1_allreduce")
        assert spec.id == 1 and "All-reduce" in spec.statement
        assert [f.path for f in spec.sources] == ["problems/collectives/p001_allreduce.cc"]
        assert c.problem(2).slug == "2_allgather"
        with pytest.raises(pkb.PkbError) as e:
            c.problem("nope")
        assert e.value.code == grpc.StatusCode.NOT_FOUND


def test_submit_streams_every_stage_and_keeps_metadata(cluster):
    with pkb.Client(cluster.target) as c:
        events = list(c.submit("1_allreduce", "FAKE_OK FAKE_SPEEDUP=2.5", world_size=2,
                               model="m1", agent="sdk-test", tags=["exp", "py"]))
        stages = [pkb.stage_name(e.stage) for e in events]
        assert stages[0] == "QUEUED" and stages[-1] == "DONE"
        assert "COMPILING" in stages and "BENCHMARKING" in stages
        assert [e.sequence for e in events] == list(range(1, len(events) + 1))
        result = events[-1].result
        assert result.status == pkb.OK
        assert result.speedup == pytest.approx(2.5)
        job = c.get(events[0].job_id)
        assert job.stage == pkb.DONE
        assert (job.request.model, job.request.agent) == ("m1", "sdk-test")
        assert list(job.request.tags) == ["exp", "py"]
        assert job.gpu_class == "cpu"
        # Watch replays the history, and from a sequence on.
        replay = list(c.watch(job.job_id))
        assert [e.sequence for e in replay] == [e.sequence for e in events]
        assert len(list(c.watch(job.job_id, after_sequence=len(events) - 1))) == 1
        # The same source again answers from the cache.
        again = c.evaluate(1, "FAKE_OK FAKE_SPEEDUP=2.5", 2)
        assert again.result.cached


def test_a_cpp_candidate_is_a_job_of_its_own_saved_as_cc(cluster):
    with pkb.Client(cluster.target) as c:
        cuda = c.evaluate(1, "FAKE_OK one source", 2)
        cpp = c.evaluate(1, "FAKE_OK one source", 2, language="cpp")
        assert cpp.result.status == pkb.OK and not cpp.result.cached  # the language is in the key
        assert cpp.result.job_key != cuda.result.job_key
        job = c.get(cpp.job_id)
        assert (job.request.language, job.gpu_class) == ("cpp", "cpu")
        assert c.get(cuda.job_id).request.language == "cuda"
        runs = (cluster.tmp / "engine_runs.log").read_text().splitlines()
        assert runs[-2].endswith("source=candidate.cu")
        assert runs[-1].endswith("source=candidate.cc")
        with pytest.raises(pkb.PkbError) as e:
            list(c.submit(1, "x", world_size=2, language="fortran"))
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "language" in e.value.message


def test_min_window_ms_travels_in_the_spec_and_keys_the_job(cluster):
    with pkb.Client(cluster.target) as c:
        default = c.evaluate(1, "FAKE_OK window source", 2)
        exact = c.evaluate(1, "FAKE_OK window source", 2, min_window_ms=0)
        assert exact.result.status == pkb.OK and not exact.result.cached
        assert exact.result.job_key != default.result.job_key
        spec = c.get(exact.job_id).request.spec
        assert spec.HasField("min_window_ms") and spec.min_window_ms == 0
        assert c.get(default.job_id).request.spec.min_window_ms == 10  # the default, completed
        with pytest.raises(pkb.PkbError) as e:
            list(c.submit(1, "x", world_size=2, min_window_ms=5000))
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "min_window_ms" in e.value.message


def test_rejections_raise_with_the_grpc_code(cluster):
    with pkb.Client(cluster.target) as c:
        with pytest.raises(pkb.PkbError) as e:
            list(c.submit(1, "x", world_size=3))
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(pkb.PkbError) as e:
            c.get("no-such-job")
        assert e.value.code == grpc.StatusCode.NOT_FOUND


def test_check_compiles_on_a_worker_only_when_asked(cluster):
    from pkb.v1 import evaluation_pb2
    with pkb.Client(cluster.target) as c:
        quick = c.check(1, "int f() { return 0; }", 2)
        assert quick.verdict == evaluation_pb2.POLICY_OK
        assert quick.compile_verdict == evaluation_pb2.CheckAnswer.COMPILE_VERDICT_UNSPECIFIED
        for _ in range(200):  # until the worker has registered
            ok = c.check(1, "int f() { return 0; }", 2, compile=True)
            if "no connected worker" not in ok.compile_message:
                break
            time.sleep(0.05)
        assert ok.compile_verdict == evaluation_pb2.CheckAnswer.COMPILED, ok
        assert ok.compiled_by == "w1" and ok.compile.ok
        bad = c.check("1_allreduce", "FAKE_COMPILE_ERROR\n", 2, compile=True)
        assert bad.compile_verdict == evaluation_pb2.CheckAnswer.COMPILE_ERROR
        assert bad.compile.diagnostics[0].line == 3
        # No job came of it: nothing was queued, nothing is stored.
        assert not (cluster.tmp / "engine_runs.log").exists()


def test_cancel_ends_a_running_job(cluster):
    with pkb.Client(cluster.target) as c:
        stream = c.submit(1, "FAKE_HANG", world_size=2)
        first = next(stream)
        job_id = first.job_id
        seen = []
        reader = threading.Thread(target=lambda: seen.extend(stream))
        reader.start()
        for _ in range(200):
            if c.get(job_id).stage == result_pb2.COMPILING:
                break
            threading.Event().wait(0.02)
        job = c.cancel(job_id)
        reader.join(30)
        assert not reader.is_alive()
        assert seen[-1].result.status == result_pb2.CANCELLED
        assert job.result.status == result_pb2.CANCELLED


def test_leaderboard_suite_history_and_roles(cluster_factory):
    c = cluster_factory(tokens="ag agent alice\nres researcher rita\nwk worker w1 gpu_class=cpu max_world_size=8\n",
                        worker_token="wk")
    with pkb.Client(c.target, token="ag") as agent, pkb.Client(c.target, token="res") as res:
        ok = agent.evaluate(1, "FAKE_OK FAKE_SPEEDUP=2.0", 2, model="m1", tags=["t1"])
        # It ranks once the service has timed it again: follow that run.
        confirmed = agent.confirmation(ok)
        assert confirmed.result.status == result_pb2.OK
        assert confirmed.result.confirms_job_id == ok.job_id
        bad = agent.evaluate(2, "FAKE_COMPILE_ERROR", 2, model="m1", tags=["t1"])
        assert bad.result.status == result_pb2.COMPILE_ERROR
        assert agent.confirmation(bad) is None
        board = res.leaderboard(problem=1, world_size=2)
        assert agent.leaderboard(problem=1, world_size=2) == board  # boards are public
        assert agent.suite(world_size=2) == res.suite(world_size=2)
        entry = board.boards[0].entries[0]
        assert (entry.submitter, entry.model, entry.speedup) == ("alice", "m1", 2.0)
        assert res.leaderboard(problem=1, seeds="secret").boards == []
        suite = res.suite(world_size=2)
        assert suite.tasks == 2
        score = suite.models[0]
        assert [f.p for f in score.fast_p] == [0, 1, 1.5, 2]
        assert [f.fast_p for f in score.fast_p] == [0.5, 0.5, 0.5, 0.0]
        assert score.geomean_speedup == pytest.approx(2.0)
        sub = agent.submission(ok.job_id, include_source=True)
        assert sub.ranks and sub.job.request.source == b"FAKE_OK FAKE_SPEEDUP=2.0"
        assert pkb.to_dict(sub.confirmation)["state"] == "CONFIRMED"
        assert sub.events[-1].stage == pkb.DONE
        mine = agent.submissions(tag="t1")
        assert [s.job_id for s in mine] == [bad.job_id, confirmed.job_id, ok.job_id]
        assert pkb.to_dict(mine[0])["status"] == "COMPILE_ERROR"


def test_the_example_agent_loop_retries_until_correct(cluster, tmp_path):
    """docs/examples/agent_loop.py: a stand-in model whose first kernel does not compile."""
    spec = importlib.util.spec_from_file_location("agent_loop",
                                                  REPO / "docs/examples/agent_loop.py")
    loop = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loop)
    attempts = tmp_path / "attempts"
    attempts.mkdir()
    (attempts / "1.cu").write_text("FAKE_COMPILE_ERROR")
    (attempts / "2.cu").write_text("FAKE_OK FAKE_SPEEDUP=0.8")
    (attempts / "3.cu").write_text("FAKE_OK FAKE_SPEEDUP=1.7")
    (attempts / "4.cu").write_text("never reached")
    prompts = []
    model = loop.replay_model(str(attempts))

    def write_kernel(prompt):
        prompts.append(prompt)
        return model(prompt)
    with pkb.Client(cluster.target) as c:
        history = loop.agent_loop(c, "1_allreduce", 2, write_kernel, attempts=5,
                                  model="replay", tags=["example"])
    assert [pkb.status_name(h.result.status) for h in history] == ["COMPILE_ERROR", "OK", "OK"]
    assert "1_allreduce" in prompts[0] and "failed" not in prompts[0]
    assert "expected ;" in prompts[1]          # the compiler's diagnostic reached the model
    assert "speedup 0.800x" in prompts[2]      # so did the timing
    assert "wall 18.75 us/call" in prompts[2]  # on the judge's clock (the fake: 15 / 0.8)
    # Every prompt carries the signature with scalars, the headers and a worked example.
    assert "args[0].f  scale = 0.5 (float)" in prompts[0]
    assert "args[1].i  chunks = 4 (int)" in prompts[0]
    assert "## include/pkb/candidate.h" in prompts[0] and "pkb_run_fn" in prompts[0]
    assert "## A worked candidate (p001_allreduce_symm.cu" in prompts[0]
    assert loop.main(["--coordinator", cluster.target, "--problem", "1", "--world-size", "2",
                      "--candidates", str(attempts), "--attempts", "1"]) == 1
