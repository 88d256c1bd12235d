"""pkb-mcp: the PKB evaluation service as an MCP server, for agent frameworks (docs/agents.md).

    pkb-mcp --coordinator host:7311 --token-file ~/.pkb-token              # stdio (the default)
    pkb-mcp --transport http --host 127.0.0.1 --port 8765                  # streamable HTTP, /mcp

Tools: list_problems, get_problem, check_candidate, submit, get_result, explain_result,
leaderboard. Each is a thin call of the SDK (pkb.Client) and pkb.agent; answers are JSON objects
with the proto's field names (snake_case), int64 values as numbers. Failures of the service come
back as tool errors that name the gRPC code (NOT_FOUND: ..., INVALID_ARGUMENT: ...).

The server holds one coordinator channel and one token: every MCP client of it acts as that
token. Over HTTP it listens on loopback unless told otherwise; put it behind your own
authentication before it listens anywhere else.
"""
from __future__ import annotations

import argparse
import functools
import os
import socket
import sys
from typing import Any, Callable, Iterator, List, Optional, Union

try:
    import anyio
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
except ImportError as e:  # the SDK itself does not need mcp
    raise SystemExit(f"pkb-mcp needs the mcp package ({e}); install pkb-client[mcp] "
                     "or `pip install mcp==2.3.0`") from None
from google.protobuf import descriptor

import pkb
from pkb import agent
from pkb.client import DONE, PkbError, stage_name, status_name

ProblemRef = Union[int, str]

INSTRUCTIONS = """\
ParallelKernelBench (PKB) evaluates one CUDA C++ file per multi-GPU problem: it compiles it, runs
it on W GPU processes, checks every rank's outputs against the PyTorch + NCCL reference in seeded
trials, and times candidate and reference on the judge's clock. Work like this: list_problems;
get_problem (statement, pkb_run's inputs/args/outputs, tolerances, roofline floor) with
include_headers once to read pkb/candidate.h; write the file; check_candidate; submit (it waits and
streams progress); explain_result for the verdict in words and what to try next; repeat. A source
that ends REJECTED is disqualified on its problem: change the source, do not resend it."""

# Compiler output and rank logs can be long; the verdict keeps what an agent reads.
_MAX_LOG = 4000


_NOT_NUMBERS = {descriptor.FieldDescriptor.TYPE_STRING, descriptor.FieldDescriptor.TYPE_BYTES,
            descriptor.FieldDescriptor.TYPE_MESSAGE, descriptor.FieldDescriptor.TYPE_GROUP}


def to_plain(message) -> dict:
    """A protobuf message as JSON-ready Python values: proto field names, enums by name, int64 as
    int (proto3 JSON writes them as strings). Numbers, bools and enums are always there, zero
    included (rank 0 has its `rank`); empty strings, lists and unset messages are left out."""
    out = {}
    for field in message.DESCRIPTOR.fields:
        if field.is_repeated or field.type in _NOT_NUMBERS:
            continue
        if field.containing_oneof is not None and not message.HasField(field.name):
            continue
        out[field.name] = _plain_scalar(field, getattr(message, field.name))
    for field, value in message.ListFields():
        out[field.name] = _plain_value(field, value)
    return {f.name: out[f.name] for f in message.DESCRIPTOR.fields if f.name in out}


def _plain_value(field, value):
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        vf = field.message_type.fields_by_name["value"]
        return {k: _plain_scalar(vf, v) for k, v in value.items()}
    if field.is_repeated:
        return [_plain_scalar(field, v) for v in value]
    return _plain_scalar(field, value)


def _plain_scalar(field, value):
    if field.type == descriptor.FieldDescriptor.TYPE_MESSAGE:
        return to_plain(value)
    if field.type == descriptor.FieldDescriptor.TYPE_ENUM:
        v = field.enum_type.values_by_number.get(value)
        return v.name if v is not None else value
    if field.type == descriptor.FieldDescriptor.TYPE_BYTES:
        return value.decode("utf-8", "replace")
    return value


def _problem(ref: ProblemRef) -> ProblemRef:
    """An id given as text ("7") is an id, not a slug."""
    if isinstance(ref, str) and ref.strip().isdigit():
        return int(ref)
    return ref


def verdict(job_id: str, result, *, events: int = 0) -> dict:
    """What submit and get_result answer for a finished job."""
    plain = to_plain(result)
    compile_ = plain.get("compile", {})
    if len(compile_.get("log", "")) > _MAX_LOG:
        compile_["log"] = "[...] " + compile_["log"][-_MAX_LOG:]
    if len(plain.get("failed_rank_log", "")) > _MAX_LOG:
        plain["failed_rank_log"] = "[...] " + plain["failed_rank_log"][-_MAX_LOG:]
    out = {"job_id": job_id, "stage": "DONE", "status": status_name(result.status),
           "message": result.message, "speedup": result.speedup, "cached": result.cached,
           "feedback": agent.feedback_from(result), "result": plain}
    if events:
        out["events_seen"] = events
    return out


class PkbTools:
    """The tools' logic over one pkb.Client, blocking; the MCP layer runs it in worker threads."""

    def __init__(self, client: pkb.Client):
        self.client = client

    def list_problems(self) -> dict:
        problems = []
        for p in self.client.problems():
            problems.append({
                "id": p.id, "slug": p.slug, "category": p.category,
                "is_collective": p.is_collective,
                "world_sizes": [l.world_size for l in p.layouts if l.supported],
                "default": {"m": p.default_m, "n": p.default_n, "dtype": p.default_dtype},
                "summary": p.statement.strip().split("\n")[0][:200],
            })
        return {"problems": problems, "count": len(problems)}

    def get_problem(self, problem: ProblemRef, world_size: int = 0,
                    include_headers: bool = False, include_source: bool = True) -> dict:
        spec = self.client.problem(_problem(problem))
        d = agent.describe_problem(spec, world_size,
                                   reference_us=agent.reference_times(spec, world_size))
        d["reference_us_note"] = (
            "the reference's time per call on this service (the baseline the speedups used, on "
            "the judge's clock) per world size and GPU class, over the newest OK results at the "
            "default shape and dtype: median, p10, p90, samples; graph_median_us is the "
            "reference replayed from a CUDA graph (0: not measured). Empty until such a result "
            "exists")
        if include_source:
            d["source_note"] = ("the problem's own code as the service runs it (C++ with "
                                "libtorch): inputs (MakeInputs), the reference (Reference), the "
                                "oracle, tolerances and roofline; then the family libraries it "
                                "includes")
        else:
            d.pop("source", None)
        if include_headers:
            d["headers"] = {f"pkb/{h}": agent.header(h) for h in agent.HEADERS}
            d["example"] = {"file": agent.EXAMPLE, "source": agent.example_candidate()}
        return d

    def check_candidate(self, problem: ProblemRef, source: str, world_size: int,
                        language: str = "cuda", compile: bool = True) -> dict:
        # The service's source policy and, with compile, a sandboxed compile on a worker
        # (Evaluation.Check): no job, no GPU, nothing kept.
        answer = to_plain(self.client.check(_problem(problem), source, world_size,
                                            language=language, compile=compile))
        log = answer.get("compile", {}).get("log")
        if log and len(log) > _MAX_LOG:
            answer["compile"]["log"] = "...\n" + log[-_MAX_LOG:]
        verdict = answer.get("compile_verdict", "COMPILE_VERDICT_UNSPECIFIED")
        if not compile:
            note = ("the service's source policy only; nothing was compiled (compile: true "
                    "compiles it on a worker).")
        elif answer.get("verdict") == "POLICY":
            note = "the source policy failed, so nothing was compiled."
        elif verdict == "NOT_COMPILED":
            note = ("the policy passed but nothing was compiled (compile_message says why); "
                    "try again later, or submit with practice: true.")
        else:
            note = ("the service's source policy, and a compile on a worker with a submission's "
                    "flags; nothing ran: correctness and speed need a submission.")
        answer.update({
            "checked": True,
            "compiled": verdict == "COMPILED",
            "note": note,
            "local_findings": local_findings(source, language),
            "local_note": ("local_findings are textual checks of the candidate contract made "
                           "here, not the service's source policy (docs/security.md)"),
        })
        return answer

    def submit(self, problem: ProblemRef, source: str, world_size: int, *, wait: bool = True,
               on_event: Optional[Callable[[Any], None]] = None, **options) -> dict:
        events = self.client.submit(_problem(problem), source, world_size, **options)
        return self._follow(events, wait, on_event)

    def get_result(self, job_id: str, wait: bool = False,
                   on_event: Optional[Callable[[Any], None]] = None) -> dict:
        job = self.client.get(job_id)
        if job.stage == DONE:
            return verdict(job.job_id, job.result)
        if not wait:
            return {"job_id": job.job_id, "stage": stage_name(job.stage),
                    "status": "PENDING", "attempts": job.attempts,
                    "message": "not finished; call get_result with wait=true to wait for it"}
        return self._follow(self.client.watch(job_id), True, on_event)

    def _follow(self, events: Iterator, wait: bool, on_event) -> dict:
        last, seen = None, 0
        for last in events:
            seen += 1
            if on_event is not None:
                on_event(last)
            if last.stage == DONE:
                return verdict(last.job_id, last.result, events=seen)
            if not wait:
                break  # the job goes on without this stream (Watch or get_result find it)
        if last is None:
            raise ToolError("the coordinator answered no event")
        return {"job_id": last.job_id, "stage": stage_name(last.stage), "status": "PENDING",
                "message": "submitted; call get_result with the job id (wait=true to wait)"}

    def explain_result(self, job_id: str) -> dict:
        job = self.client.get(job_id)
        if job.stage != DONE:
            return {"job_id": job_id, "stage": stage_name(job.stage), "status": "PENDING",
                    "summary": f"not finished: the job is {stage_name(job.stage)}",
                    "next_steps": ["call get_result with wait=true, then explain_result again"]}
        out = {"job_id": job_id, **agent.explain(job.result),
               "feedback": agent.feedback_from(job.result)}
        return out

    def leaderboard(self, problem: ProblemRef = 0, world_size: int = 0, gpu_class: str = "",
                    dtype: str = "", by: str = "user", limit: int = 10,
                    seeds: str = "any") -> dict:
        if by not in ("user", "model"):
            raise ValueError(f"by must be user or model, not {by!r}")
        if seeds not in ("any", "public", "secret"):
            raise ValueError(f"seeds must be any, public or secret, not {seeds!r}")
        problem = _problem(problem) if problem else 0
        if isinstance(problem, str):
            problem = self.client.problem(problem).id
        answer = self.client.leaderboard(by=by, limit=limit, problem=problem,
                                         world_size=world_size, gpu_class=gpu_class, dtype=dtype,
                                         seeds=seeds)
        out = to_plain(answer)
        out.setdefault("boards", [])
        return out


def local_findings(source: str, language: str = "cuda") -> List[str]:
    """What the candidate contract (include/pkb/candidate.h) asks of every source, checked as text."""
    found = []
    if not any(f"pkb/{h}" in source for h in ("candidate.h", "aten_core.h", "aten.h")):
        found.append("no #include <pkb/candidate.h>")
    if "PKB_CANDIDATE_API_V1" not in source:
        found.append("no PKB_CANDIDATE_API_V1; at file scope (the API version the source is "
                     "written for)")
    if "pkb_run" not in source:
        found.append("no pkb_run: export extern \"C\" int pkb_run(pkb_context*, const pkb_tensor*, "
                     "int, const pkb_scalar*, int, pkb_tensor*, int)")
    elif 'extern "C"' not in source:
        found.append("pkb_run must have C linkage (extern \"C\")")
    if language not in ("cuda", "cpp", ""):
        found.append(f"language {language!r}: the service takes cuda or cpp")
    return found


def build_server(client: pkb.Client) -> MCPServer:
    """The MCP server over ``client``; run it with .run("stdio") or serve_http()."""
    tools = PkbTools(client)
    app = MCPServer("pkb", title="ParallelKernelBench evaluation service",
                    instructions=INSTRUCTIONS, version=pkb.__version__)

    async def blocking(fn, *args, **kwargs):
        try:
            return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))
        except (PkbError, ValueError, FileNotFoundError) as e:
            raise ToolError(str(e)) from None

    def progress(ctx: Context):
        """An on_event that reports each stage event as MCP progress, from the worker thread."""
        def on_event(ev):
            message = stage_name(ev.stage) + (f": {ev.message}" if ev.message else "")
            if ev.stage == DONE:
                message = f"DONE: {status_name(ev.result.status)}"
            try:
                anyio.from_thread.run(
                    functools.partial(ctx.report_progress, ev.sequence, None, message))
            except Exception:  # a client that stopped listening must not fail the job's follow
                pass
        return on_event

    @app.tool()
    async def list_problems() -> dict:
        """Every problem of the catalog: id, slug, category, the world sizes it supports, its
        default shape, and the first line of its statement."""
        return await blocking(tools.list_problems)

    @app.tool()
    async def get_problem(problem: ProblemRef, world_size: int = 0,
                          include_headers: bool = False, include_source: bool = True) -> dict:
        """One problem as a candidate sees it: the statement; per world size every rank's
        pkb_run arguments by ABI position (inputs[i], args[i].i or args[i].f, outputs[j]) with
        shape, dtype and PKB_* enum; the process groups; tolerances with their reason; the
        roofline floor in us; the reference's measured time per world size and GPU class on this
        service (reference_us); the problem's own code, reference included (source). problem: id
        or slug. world_size 0: every world size. include_headers: also the text of
        pkb/candidate.h, device.cuh, aten_core.h, aten.h and a worked example candidate.
        include_source false: leave the code out."""
        return await blocking(tools.get_problem, problem, world_size, include_headers,
                              include_source)

    @app.tool()
    async def check_candidate(problem: ProblemRef, source: str, world_size: int,
                              language: str = "cuda", compile: bool = True) -> dict:
        """Checks a source against the static source policy and compiles it on a worker as a
        submission is compiled (sandboxed; no GPU, no job, nothing kept; seconds, at most 120 s).
        verdict: POLICY_OK or POLICY (policy_findings). compile_verdict: COMPILED, COMPILE_ERROR
        (compile.diagnostics with line and column, compile.log) or NOT_COMPILED (compile_message
        says why). compile: false checks the policy only, in milliseconds."""
        return await blocking(tools.check_candidate, problem, source, world_size, language,
                              compile)

    @app.tool()
    async def submit(problem: ProblemRef, source: str, world_size: int, ctx: Context,
                     wait: bool = True, dtype: str = "", m: int = 0, n: int = 0,
                     trials: int = 0, warmup: int = 0, iters: int = 0, language: str = "", gpu_class: str = "", model: str = "",
                     agent_name: str = "pkb-mcp", tags: Optional[List[str]] = None,
                     ranked: bool = False, no_cache: bool = False) -> dict:
        """Submits one candidate source (CUDA C++; language "cpp" for a host-only C++ candidate on
        a CPU worker). wait=true (default): follows the job to its verdict, reporting each stage
        (QUEUED, COMPILING, VERIFYING per trial, BENCHMARKING, DONE) as MCP progress, and answers
        the verdict: status, speedup, feedback (diagnostics, first bad outputs, timings, roofline)
        and the full result. wait=false: answers the job id at once; then get_result. dtype, m, n:
        another shape within the problem's limits (get_problem); trials, warmup, iters: 0 for the
        service's defaults."""
        return await blocking(tools.submit, problem, source, world_size, wait=wait,
                              on_event=progress(ctx), dtype=dtype, m=m, n=n, trials=trials,
                              warmup=warmup, iters=iters, language=language,
                              gpu_class=gpu_class, model=model, agent=agent_name,
                              tags=list(tags or ()), ranked=ranked, no_cache=no_cache)

    @app.tool()
    async def get_result(job_id: str, ctx: Context, wait: bool = False) -> dict:
        """A job's verdict when it is DONE, else its stage. wait=true: follows it to DONE,
        reporting progress, then answers the verdict."""
        return await blocking(tools.get_result, job_id, wait, on_event=progress(ctx))

    @app.tool()
    async def explain_result(job_id: str) -> dict:
        """A finished job's verdict in plain words, the facts it rests on (diagnostics, bad
        outputs, timings against the roofline floor), and what to try next."""
        return await blocking(tools.explain_result, job_id)

    @app.tool()
    async def leaderboard(problem: ProblemRef = 0, world_size: int = 0, gpu_class: str = "",
                          dtype: str = "", by: str = "user", limit: int = 10,
                          seeds: str = "any") -> dict:
        """Per board (problem, world size, dtype, GPU class) the best ranking result per user (by
        "user") or per model (by "model"), best first, with speedup and the candidate's and the
        reference's median times. problem 0: every problem. seeds: any, public or secret."""
        return await blocking(tools.leaderboard, problem, world_size, gpu_class, dtype, by, limit,
                              seeds)

    return app


def serve_http(app: MCPServer, host: str, port: int, path: str = "/mcp",
               port_file: str = "") -> None:
    """Streamable HTTP at http://host:port/path; port 0 picks a free port (written to port_file)."""
    import uvicorn

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    bound = sock.getsockname()[1]
    print(f"pkb-mcp: streamable HTTP on http://{host}:{bound}{path}", file=sys.stderr, flush=True)
    if port_file:
        tmp = port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{bound}\n")
        os.replace(tmp, port_file)
    starlette_app = app.streamable_http_app(streamable_http_path=path, host=host)
    server = uvicorn.Server(uvicorn.Config(starlette_app, log_level="warning"))
    anyio.run(functools.partial(server.serve, sockets=[sock]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="pkb-mcp", description=__doc__.split("\n\n")[0])
    ap.add_argument("--coordinator", default=None, help="host:port (env PKB_COORDINATOR, else "
                    "127.0.0.1:7311)")
    ap.add_argument("--token-file", default=None, help="file holding the bearer token (else env "
                    "PKB_TOKEN)")
    ap.add_argument("--tls-ca", default=None, help="PEM file: connect with TLS (env PKB_TLS_CA)")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per unary call")
    ap.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    ap.add_argument("--host", default="127.0.0.1", help="http: address to listen on")
    ap.add_argument("--port", type=int, default=8765, help="http: port (0: any free port)")
    ap.add_argument("--path", default="/mcp", help="http: the endpoint's path")
    ap.add_argument("--port-file", default="", help="http: write the bound port here")
    a = ap.parse_args(argv)
    token = None
    if a.token_file:
        try:
            with open(a.token_file) as f:
                token = f.read().strip()
        except OSError as e:
            ap.error(f"--token-file: {e}")
    client = pkb.Client(a.coordinator, token=token, tls_ca=a.tls_ca, timeout=a.timeout)
    app = build_server(client)
    try:
        if a.transport == "stdio":
            app.run("stdio")
        else:
            serve_http(app, a.host, a.port, a.path, a.port_file)
    except KeyboardInterrupt:
        pass
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
