"""What an LLM agent reads: a problem in the candidate ABI's terms, a prompt, and a verdict in words.

    import pkb, pkb.agent
    with pkb.Client() as c:
        spec = c.problem("1_allreduce")
        prompt = pkb.agent.prompt_for(spec, world_size=8)           # statement, ABI, headers, example
        done = c.evaluate(spec.id, write_kernel(prompt), 8)
        print(pkb.agent.feedback_from(done.result))                 # diagnostics, errors, timings
        print(pkb.agent.explain(done.result)["next_steps"])

The candidate headers (include/pkb/*) and one worked example ship inside the package
(``pkb/data/``, copied there when the package is built), so an agent never needs a checkout.
The MCP server (pkb.mcp_server) answers its tools with these functions.
"""
from __future__ import annotations

import importlib.resources
from typing import Dict, List, Optional

from pkb.client import OK, status_name
from pkb.v1 import problem_pb2, result_pb2

# The engine's ceilings for one H200 (worker/engine/verdict.cc, docs/benchmarks.md): the
# roofline floor of a problem at W is the largest of its per-rank NVLink bytes, HBM bytes and
# FLOPs over these, as EvalResult.roofline.floor_us reports it.
NVLINK_BYTES_PER_SECOND = 450e9
HBM_BYTES_PER_SECOND = 4.3e12
FLOPS_PER_SECOND = 790e12

HEADERS = ("candidate.h", "device.cuh", "aten_core.h", "aten.h")
EXAMPLE = "p001_allreduce_symm.cu"

# ABI names (include/pkb/candidate.h) of the catalog's dtype strings.
_PKB_DTYPE = {
    "bfloat16": "PKB_BFLOAT16", "float16": "PKB_FLOAT16", "float32": "PKB_FLOAT32",
    "float64": "PKB_FLOAT64", "int64": "PKB_INT64", "int32": "PKB_INT32", "uint8": "PKB_UINT8",
    "int8": "PKB_INT8", "bool": "PKB_BOOL", "float8_e4m3fn": "PKB_FLOAT8_E4M3",
    "float8_e5m2": "PKB_FLOAT8_E5M2", "complex64": "PKB_COMPLEX64",
}


def _data(name: str) -> str:
    try:
        return (importlib.resources.files("pkb") / "data" / name).read_text()
    except FileNotFoundError:
        raise FileNotFoundError(
            f"pkb/data/{name} is not in this install of pkb-client; it is copied there when the "
            "package is built from a PKB checkout (client/python/setup.py)") from None


def header(name: str = "candidate.h") -> str:
    """The text of include/pkb/<name> as this SDK was built with (one of HEADERS)."""
    if name not in HEADERS:
        raise ValueError(f"no header {name!r}; there are {', '.join(HEADERS)}")
    return _data(name)


def example_candidate() -> str:
    """A worked candidate (problem 1, the all-reduce over symmetric memory and the device barrier)."""
    return _data(EXAMPLE)


def roofline_floor_us(layout: problem_pb2.WorldLayout) -> float:
    """The least time one call can take at this layout on an H200, in microseconds (0: unknown)."""
    floor_s = max(layout.nvlink_bytes / NVLINK_BYTES_PER_SECOND,
                  layout.hbm_bytes / HBM_BYTES_PER_SECOND, layout.flops / FLOPS_PER_SECOND)
    return floor_s * 1e6


def _tensor(t: problem_pb2.TensorDecl, array: str, index: int) -> dict:
    d = {"abi": f"{array}[{index}]", "name": t.name, "shape": [int(x) for x in t.shape],
         "dtype": t.dtype, "pkb_dtype": _PKB_DTYPE.get(t.dtype, "")}
    if t.note:
        d["note"] = t.note
    if t.rows_from:
        d["rows_from"] = t.rows_from
    return d


def _scalar(s: problem_pb2.ScalarDecl, index: int) -> dict:
    is_int = s.kind == "int"
    value = int(s.value) if is_int else s.value
    return {"abi": f"args[{index}].{'i' if is_int else 'f'}", "name": s.name, "kind": s.kind,
            "pkb_kind": "PKB_SCALAR_INT" if is_int else "PKB_SCALAR_FLOAT", "value": value}


def describe_layout(layout: problem_pb2.WorldLayout) -> dict:
    """One world size: every rank's signature in pkb_run's terms (inputs[i], args[i].i or .f,
    outputs[j]), the process groups, and the roofline floor."""
    d = {"world_size": layout.world_size, "supported": layout.supported}
    if not layout.supported:
        d["unsupported_reason"] = layout.unsupported_reason
        return d
    d["ranks"] = [{
        "rank": r.rank,
        "inputs": [_tensor(t, "inputs", i) for i, t in enumerate(r.inputs)],
        "scalars": [_scalar(s, i) for i, s in enumerate(r.scalars)],
        "outputs": [_tensor(t, "outputs", i) for i, t in enumerate(r.outputs)],
    } for r in layout.ranks]
    if len(layout.ranks) == 1 and layout.world_size > 1:
        d["ranks_note"] = "every rank has rank 0's signature"
    d["groups"] = [{"name": g.name, "partition": [list(p.ranks) for p in g.partition]}
                   for g in layout.groups]
    d["per_rank"] = {"nvlink_bytes": layout.nvlink_bytes, "hbm_bytes": layout.hbm_bytes,
                     "flops": layout.flops}
    d["roofline_floor_us"] = round(roofline_floor_us(layout), 3)
    r = layout.ranked_shapes
    if r.m_step and r.n_step:
        d["ranked_shapes"] = {
            "m": {"min": r.m_min, "max": r.m_max, "step": r.m_step},
            "n": {"min": r.n_min, "max": r.n_max, "step": r.n_step},
            "note": ("ranked runs are also timed at two shapes drawn from this range after "
                     "submission: take every size from the tensors, never the default's"),
        }
    return d


def describe_problem(spec: problem_pb2.ProblemSpec, world_size: int = 0,
                     reference_us: Optional[List[dict]] = None) -> dict:
    """The spec as an agent acts on it. ``world_size`` 0: every world size the catalog lists.
    ``reference_us``: measured reference times (see reference_times), when the caller has them."""
    layouts = [l for l in spec.layouts if not world_size or l.world_size == world_size]
    if world_size and not layouts:
        listed = ", ".join(str(l.world_size) for l in spec.layouts)
        raise ValueError(f"problem {spec.slug} lists no world size {world_size} (it lists {listed})")
    d = {
        "id": spec.id, "slug": spec.slug, "version": spec.version, "category": spec.category,
        "origin": spec.origin, "candidate_api_version": spec.candidate_api_version,
        "statement": spec.statement,
        "entry_point": ("extern \"C\" int pkb_run(pkb_context* ctx, const pkb_tensor* inputs, "
                        "int num_inputs, const pkb_scalar* args, int num_args, "
                        "pkb_tensor* outputs, int num_outputs)"),
        "defaults": {"m": spec.default_m, "n": spec.default_n, "dtype": spec.default_dtype},
        "limits": {"max_m": spec.max_m, "max_n": spec.max_n, "max_mn": spec.max_mn,
                   "dtypes": list(spec.dtypes)},
        "tolerances": [{"output": t.output, "atol": t.atol, "rtol": t.rtol, "exact": t.exact,
                        "reason": t.rationale} for t in spec.tolerances],
        "is_collective": spec.is_collective,
        "layouts": [describe_layout(l) for l in layouts],
        "roofline_note": ("roofline_floor_us: max(nvlink_bytes / 450 GB/s, hbm_bytes / 4.3 TB/s, "
                          "flops / 790 TFLOP/s) per rank, an H200's ceilings"),
    }
    if not spec.tolerances:
        d["tolerance_note"] = ("no per-output tolerance listed: bf16 outputs are checked at "
                               "atol = rtol = 1e-2 by default; NaN never passes")
    if reference_us is not None:
        d["reference_us"] = reference_us
    if spec.sources:
        d["source"] = [{"path": f.path, "text": f.text} for f in spec.sources]
    return d


def reference_times(spec: problem_pb2.ProblemSpec, world_size: int = 0) -> List[dict]:
    """The reference's measured time per call on the service, per (W, GPU class), from the spec
    (ProblemSpec.reference_times, which GetProblem fills from the service's OK results at the
    default shape and dtype): the median, 10th and 90th percentiles of the baselines the speedups
    used, over ``samples`` results, and the CUDA-graph baseline's median (0: not measured)."""
    return [{"world_size": t.world_size, "gpu_class": t.gpu_class,
             "median_us": t.median_us, "p10_us": t.p10_us, "p90_us": t.p90_us,
             "samples": t.samples, "graph_median_us": t.graph_median_us}
            for t in spec.reference_times if not world_size or t.world_size == world_size]


def _signature_lines(layout: problem_pb2.WorldLayout) -> List[str]:
    lines = []
    for r in layout.ranks:
        lines.append(f"rank {r.rank}" + (" (every rank)" if len(layout.ranks) == 1 else "") + ":")
        for i, t in enumerate(r.inputs):
            lines.append(f"  inputs[{i}]  {t.name} {list(t.shape)} {t.dtype}"
                         f" ({_PKB_DTYPE.get(t.dtype, '?')})" + (f" - {t.note}" if t.note else ""))
        for i, s in enumerate(r.scalars):
            field = "i" if s.kind == "int" else "f"
            value = int(s.value) if s.kind == "int" else s.value
            lines.append(f"  args[{i}].{field}  {s.name} = {value} ({s.kind})")
        for i, t in enumerate(r.outputs):
            lines.append(f"  outputs[{i}] {t.name} {list(t.shape)} {t.dtype}"
                         f" ({_PKB_DTYPE.get(t.dtype, '?')})" + (f" - {t.note}" if t.note else "")
                         + (f"; rows written into {t.rows_from}" if t.rows_from else ""))
    for g in layout.groups:
        lines.append(f"group {g.name}: " + " ".join(str(list(p.ranks)) for p in g.partition))
    floor = roofline_floor_us(layout)
    if floor > 0:
        lines.append(f"roofline floor on an H200: {floor:.2f} us per call")
    return lines


def prompt_for(spec: problem_pb2.ProblemSpec, world_size: int, feedback: Optional[str] = None,
               *, headers: bool = True, example: bool = True) -> str:
    """What the model reads: the statement, pkb_run's signature at this world size (inputs,
    scalars, outputs by ABI position), the tolerances, the candidate headers and a worked example
    (both as shipped with this SDK), and after the first try what went wrong last time."""
    layout = next((l for l in spec.layouts if l.world_size == world_size), None)
    parts = [f"# Problem {spec.id}: {spec.slug} (candidate API v{spec.candidate_api_version}), "
             f"W = {world_size}", spec.statement]
    if layout is None:
        parts.append(f"(the catalog lists no layout at W = {world_size})")
    elif not layout.supported:
        parts.append(f"W = {world_size} is not supported: {layout.unsupported_reason}")
    else:
        parts.append("## Signature\nextern \"C\" int pkb_run(pkb_context* ctx, const pkb_tensor* "
                     "inputs, int num_inputs, const pkb_scalar* args, int num_args, pkb_tensor* "
                     "outputs, int num_outputs);\n" + "\n".join(_signature_lines(layout)))
    tol = [f"tolerance {t.output}: atol {t.atol} rtol {t.rtol}" + (" (exact)" if t.exact else "")
           + (f" - {t.rationale}" if t.rationale else "") for t in spec.tolerances]
    parts.append("\n".join(tol) if tol else
                 "tolerance: bf16 default atol = rtol = 1e-2; NaN never passes")
    if headers:
        for name in HEADERS:
            parts.append(f"## include/pkb/{name}\n```c++\n{header(name)}```")
    if example:
        parts.append(f"## A worked candidate ({EXAMPLE}, problem 1)\n```c++\n"
                     f"{example_candidate()}```")
    if feedback:
        parts.append("## Your last attempt failed or was slow:\n" + feedback)
    return "\n\n".join(parts)


def _timing_line(name: str, t: result_pb2.Timing) -> str:
    line = f"{name}: wall {t.wall_per_iter_us:.2f} us/call (judge's clock)"
    if t.median_us:
        line += f", events median {t.median_us:.2f} us"
    if t.per_rank_median_us:
        line += ", per-rank medians " + " ".join(f"{x:.2f}" for x in t.per_rank_median_us) + " us"
    return line


def feedback_from(result: result_pb2.EvalResult) -> str:
    """The verdict as the model should read it: diagnostics, the first bad outputs, the timings
    on the judge's clock with the per-rank medians, and the roofline floor."""
    lines = [f"verdict {status_name(result.status)}: {result.message}"]
    for d in result.policy_findings[:20]:  # the source policy (docs/security.md), not the compiler
        lines.append(f"POLICY {d.file}:{d.line}: {d.message}")
    for d in result.compile.diagnostics[:20]:
        lines.append(f"{d.file}:{d.line}:{d.column}: {d.severity}: {d.message}")
    for rt in [t for t in result.rank_trials if not t.ok][:4]:
        lines.append(f"rank {rt.rank} trial {rt.trial}: {rt.error}")
        for o in [o for o in rt.outputs if not o.ok][:4]:
            lines.append(f"  output {o.name}: {o.problem} max_abs {o.max_abs_error:.3g} "
                         f"bad {o.bad_count}/{o.numel} first at {o.first_bad_index} "
                         f"(want {o.expected_at_first_bad:.6g}, got {o.actual_at_first_bad:.6g}) "
                         f"nan {o.nan_count} unwritten {o.unwritten_count}")
    if result.status == OK and result.functional:
        lines.append("functional run: correct on every rank; no speedup (its ranks may share "
                     "GPUs, so its timings are not comparable)")
    elif result.status == OK:
        lines.append(f"candidate median {result.candidate.median_us:.2f} us, baseline "
                     f"{result.baseline.median_us:.2f} us, speedup {result.speedup:.3f}x")
        lines.append(_timing_line("candidate", result.candidate))
        lines.append(_timing_line("baseline", result.baseline))
        if result.speedup_low or result.speedup_high:
            lines.append(f"speedup interval {result.speedup_low:.3f}x .. "
                         f"{result.speedup_high:.3f}x")
    r = result.roofline
    if r.floor_us:
        line = f"roofline floor {r.floor_us:.2f} us"
        if r.percent_of_roofline:
            line += f" ({r.percent_of_roofline:.1f}% reached)"
        if r.busbw_gbps:
            line += f", algbw {r.algbw_gbps:.1f} GB/s, busbw {r.busbw_gbps:.1f} GB/s"
        lines.append(line)
    lines.extend(_profile_lines(result))
    if result.failed_rank_log:
        lines.append("log tail:\n" + result.failed_rank_log[-2000:])
    return "\n".join(lines)


def _profile_lines(result: result_pb2.EvalResult, records: int = 8) -> List[str]:
    """Rank 0's profile pass: one call of each side, its longest records first."""
    if not result.profiles:
        return []
    p = result.profiles[0]
    out = []
    for side, call in (("candidate", p.candidate), ("reference", p.reference)):
        if not call.records:
            if call.note:
                out.append(f"profile of the {side}: {call.note}")
            continue
        out.append(f"profile of the {side} (rank {p.rank}, one call, untimed): "
                   f"{len(call.records)} records in {call.span_us:.2f} us, busy {call.busy_us:.2f} us")
        for rec in sorted(call.records, key=lambda r: -r.duration_us)[:records]:
            what = f"  {rec.duration_us:8.2f} us at {rec.start_us:8.2f}  {rec.name[:80]}"
            if len(rec.grid) == 3:
                what += (f"  grid {rec.grid[0]}x{rec.grid[1]}x{rec.grid[2]} block "
                         f"{rec.block[0]}x{rec.block[1]}x{rec.block[2]}, "
                         f"{rec.registers_per_thread} regs, {rec.shared_memory_bytes} B shared")
            elif rec.bytes:
                what += f"  {rec.bytes} B"
            out.append(what)
    return out


# Per verdict: what it means, in plain words, and what an agent should try next.
_EXPLAIN: Dict[int, tuple] = {
    result_pb2.OK: ("Correct on every rank in every trial; the timings are valid.", [
        "Compare wall_per_iter_us with the roofline floor: the gap is what is left to win.",
        "If the speedup is below 1, the reference (NCCL + ATen) is faster: fuse the "
        "communication with the compute, or move data over NVLink with symmetric memory "
        "(ctx->symm_alloc) and the device barrier (pkb/device.cuh).",
        "Per-rank medians that differ a lot point at a rank waiting for another."]),
    result_pb2.COMPILE_ERROR: ("The source did not compile; nothing ran.", [
        "Fix the first diagnostic first; later ones often follow from it.",
        "Include <pkb/candidate.h>, state PKB_CANDIDATE_API_V1; once at file scope, and export "
        "extern \"C\" int pkb_run(...) with the exact signature of the header."]),
    result_pb2.RUNTIME_ERROR: ("The candidate crashed, returned non-zero, or faulted on the "
                               "device.", [
        "Read the rank's error and the log tail; ctx->set_error gives your own failures a "
        "message.",
        "Check every index against the shapes in the spec (outputs[j].shape), and that all "
        "device work is on ctx->stream.",
        "Collective set-up (symm_alloc) must be called by every rank in the same order."]),
    result_pb2.MISMATCH: ("It ran, but some output on some rank is wrong.", [
        "Look at the first bad index, the value wanted and the value got: a wrong offset, a "
        "missing rank's share, or a race on a peer buffer.",
        "unwritten > 0: some elements still hold the poison pattern; write every element of "
        "every output.",
        "A failure in a later trial only: state kept across calls (inputs and outputs rotate "
        "between calls; do not cache pointers)."]),
    result_pb2.TIMEOUT: ("A stage ran past its wall-clock limit.", [
        "A device wait that never ends is the usual cause: every rank must reach every barrier, "
        "and every block of a barrier kernel must be resident at once.",
        "Bound device spin-waits (the device barrier traps with a report after its timeout)."]),
    result_pb2.REJECTED: ("The source breaks a rule of the harness (the source policy, or work "
                          "escaping the timed window). A rejected source is disqualified on "
                          "this problem: it never ranks.", [
        "Read the diagnostics: each names the rule and the reason (docs/security.md).",
        "Change the source (a new source is a new submission); do not retry the same text."]),
    result_pb2.WORKER_LOST: ("The service lost the worker running the job; not the "
                             "candidate's fault.", ["Submit again."]),
    result_pb2.INTERNAL: ("A fault of the service itself; not the candidate's fault.",
                          ["Submit again; report it if it repeats."]),
    result_pb2.NO_DEVICE: ("It compiled, but the node that took it has no GPU, so nothing ran.",
                           ["Submit to a GPU class (gpu_class \"h200\"), or a C++ candidate "
                            "(language \"cpp\") to a CPU worker for a correctness check."]),
    result_pb2.CANCELLED: ("The job was cancelled before it finished.", ["Submit again."]),
    result_pb2.VOIDED: ("An admin voided what the job's worker reported: the verdict is not "
                        "trusted.", ["Submit again; the result will run on another worker."]),
}


def explain(result: result_pb2.EvalResult) -> dict:
    """The verdict in plain words and what to try next, with the facts they rest on."""
    meaning, steps = _EXPLAIN.get(result.status, ("An unknown verdict.", []))
    facts = [result.message] if result.message else []
    for d in result.compile.diagnostics[:5]:
        facts.append(f"{d.file}:{d.line}: {d.severity}: {d.message}")
    for rt in [t for t in result.rank_trials if not t.ok][:2]:
        if rt.error:
            facts.append(f"rank {rt.rank} trial {rt.trial}: {rt.error}")
        for o in [o for o in rt.outputs if not o.ok][:2]:
            facts.append(f"rank {rt.rank} trial {rt.trial} output {o.name}: {o.bad_count} of "
                         f"{o.numel} elements bad, first at {o.first_bad_index}, "
                         f"nan {o.nan_count}, unwritten {o.unwritten_count}")
    summary = f"{status_name(result.status)}: {meaning}"
    if result.status == OK:
        c = result.candidate.wall_per_iter_us or result.candidate.median_us
        summary += f" Speedup {result.speedup:.2f}x over the reference"
        if c:
            summary += f" ({c:.2f} us per call)"
        if result.roofline.floor_us and c:
            summary += (f"; the roofline floor is {result.roofline.floor_us:.2f} us, "
                        f"{100 * result.roofline.floor_us / c:.1f}% of it reached")
        summary += "."
        if result.speedup and result.speedup < 1:
            steps = [steps[1], steps[0], steps[2]]
    return {"status": status_name(result.status), "summary": summary, "facts": facts,
            "next_steps": list(steps)}
