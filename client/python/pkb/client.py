"""A small, blocking wrapper over the pkb.v1 gRPC services (Evaluation and Leaderboard).

Messages are the generated protobuf classes (``pkb.v1.evaluation_pb2`` etc.); use
``pkb.to_dict`` for plain dicts. Errors are ``pkb.PkbError`` carrying the gRPC status code.
"""
from __future__ import annotations

import os
import time
from typing import Iterable, Iterator, List, Optional, Sequence, Union

import grpc
from google.protobuf import json_format

from pkb.v1 import evaluation_pb2, evaluation_pb2_grpc, leaderboard_pb2, leaderboard_pb2_grpc
from pkb.v1 import problem_pb2, result_pb2

DONE = result_pb2.DONE
OK = result_pb2.OK


class PkbError(Exception):
    """A call failed. ``code`` is the grpc.StatusCode (NOT_FOUND, INVALID_ARGUMENT, ...)."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


def stage_name(stage: int) -> str:
    return result_pb2.Stage.Name(stage)


def status_name(status: int) -> str:
    return result_pb2.Status.Name(status)


def to_dict(message) -> dict:
    """The message as proto3 JSON would spell it (lowerCamelCase keys, enums by name)."""
    return json_format.MessageToDict(message)


def _seeds(seeds: str) -> int:
    return {"any": leaderboard_pb2.SEEDS_ANY, "public": leaderboard_pb2.SEEDS_PUBLIC,
            "secret": leaderboard_pb2.SEEDS_SECRET}[seeds]


def _filter(problem=0, world_size=0, gpu_class="", dtype="", submitter="", model="", agent="",
            tag="", since: float = 0, until: float = 0, seeds="any") -> leaderboard_pb2.ResultFilter:
    """since/until: unix seconds (floats) or 0 for open."""
    return leaderboard_pb2.ResultFilter(
        problem_id=problem, world_size=world_size, gpu_class=gpu_class, dtype=dtype,
        submitter=submitter, model=model, agent=agent, tag=tag,
        from_unix_micros=int(since * 1e6), to_unix_micros=int(until * 1e6), seeds=_seeds(seeds))


class Client:
    """One channel to a coordinator.

    ``target`` defaults to $PKB_COORDINATOR (else 127.0.0.1:7311), ``token`` to $PKB_TOKEN,
    ``tls_ca`` (a PEM file: connect with TLS) to $PKB_TLS_CA. ``timeout`` bounds unary calls and
    the wait for the coordinator when a stream starts.
    """

    def __init__(self, target: Optional[str] = None, token: Optional[str] = None,
                 tls_ca: Optional[str] = None, timeout: float = 30.0):
        target = target or os.environ.get("PKB_COORDINATOR", "127.0.0.1:7311")
        self._token = token if token is not None else os.environ.get("PKB_TOKEN", "")
        tls_ca = tls_ca or os.environ.get("PKB_TLS_CA", "")
        options = [("grpc.max_receive_message_length", 64 << 20)]
        if tls_ca:
            with open(tls_ca, "rb") as f:
                creds = grpc.ssl_channel_credentials(root_certificates=f.read())
            self._channel = grpc.secure_channel(target, creds, options=options)
        else:
            self._channel = grpc.insecure_channel(target, options=options)
        self._eval = evaluation_pb2_grpc.EvaluationStub(self._channel)
        self._board = leaderboard_pb2_grpc.LeaderboardStub(self._channel)
        self.timeout = timeout

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- plumbing -------------------------------------------------------------------------

    def _metadata(self):
        return (("authorization", f"Bearer {self._token}"),) if self._token else ()

    def _unary(self, method, request, timeout: Optional[float] = None):
        try:
            return method(request, timeout=timeout or self.timeout, metadata=self._metadata(),
                          wait_for_ready=True)
        except grpc.RpcError as e:
            raise PkbError(e.code(), e.details()) from None

    # --- Evaluation ---------------------------------------------------------------------------

    def submit(self, problem: Union[int, str], source: Union[str, bytes], world_size: int, *,
               dtype: str = "",
               m: int = 0, n: int = 0, trials: int = 0, warmup: int = 0, iters: int = 0,
               gpu_class: str = "", no_cache: bool = False, model: str = "", agent: str = "",
               tags: Sequence[str] = (), ranked: bool = False,
               submitter: str = "", language: str = "",
               practice: bool = False,
               functional: bool = False,
               min_window_ms: Optional[float] = None) -> Iterator[result_pb2.EvalEvent]:
        """Submits a candidate and yields its events, QUEUED first, DONE (with .result) last.

        ``problem`` is an id or a slug; ``source`` is text (sent as UTF-8) or UTF-8 bytes.
        ``language`` is "cuda" (the default) or "cpp", a host-only C++ candidate for GPU-less
        workers (gpu_class "cpu"). ``practice`` runs never rank and never disqualify the source
        (a REJECTED practice run does not count against it). ``functional`` asks for correctness
        only: the W ranks may share a node's GPUs (so a W = 8 kernel can be tried where GPUs are
        few), the candidate gets no NCCL communicator, and the result has no speedup and never
        ranks. ``min_window_ms`` (None: the service's 10 ms) is how long each side's timed window
        lasts at least: more calls than ``iters`` where those are short; 0 gives exactly ``iters``
        (PKB's count). A stream that breaks mid-job, or ends before DONE, is
        reattached with Watch from the last event seen, so every event is yielded once, however
        long the job takes.
        """
        if isinstance(problem, str):
            problem = self.problem(problem).id
        if isinstance(source, str):
            source = source.encode("utf-8")
        request = evaluation_pb2.SubmitRequest(
            problem_id=problem, world_size=world_size, source=source, dtype=dtype, m=m, n=n,
            trials=trials, warmup=warmup, iters=iters, gpu_class=gpu_class, no_cache=no_cache,
            submitter=submitter, model=model, agent=agent, tags=list(tags), ranked=ranked,
            language=language, practice=practice, functional=functional)
        if min_window_ms is not None:
            request.spec.min_window_ms = min_window_ms
        yield from self._follow(request=request)

    def evaluate(self, *args, **kwargs) -> result_pb2.EvalEvent:
        """``submit`` to the end; returns the DONE event (its .result is the verdict)."""
        last = None
        for last in self.submit(*args, **kwargs):
            pass
        return last

    def confirmation(self, done: result_pb2.EvalEvent) -> Optional[result_pb2.EvalEvent]:
        """Follows the confirmation run of a DONE event's result (the service times every result
        that could rank a second time; boards use the lower speedup) to its DONE event, or
        returns None when the result has none (not OK, a copy, or itself a confirmation)."""
        job_id = done.result.confirmation_job_id
        if not job_id:
            return None
        last = None
        for last in self.watch(job_id):
            pass
        return last

    def shape_runs(self, done: result_pb2.EvalEvent) -> List[result_pb2.EvalEvent]:
        """Follows the shape runs of a ranked DONE event's result (the same source at two more
        shapes drawn by the service; boards use the geometric mean over the shapes) to their DONE
        events, in the order drawn: each one's ``result`` has its verdict and speedup, and
        ``c.get(event.job_id).request.spec`` its shape. Empty when the result has none."""
        out = []
        for job_id in done.result.shape_job_ids:
            last = None
            for last in self.watch(job_id):
                pass
            out.append(last)
        return out

    def watch(self, job_id: str, after_sequence: int = 0) -> Iterator[result_pb2.EvalEvent]:
        """Replays a job's events after ``after_sequence``, then the live ones until DONE."""
        yield from self._follow(job_id=job_id, after=after_sequence)

    # Codes after which a follow reattaches: the coordinator restarted or the network dropped.
    _TRANSIENT = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.ABORTED,
                  grpc.StatusCode.DEADLINE_EXCEEDED)

    def _follow(self, request=None, job_id="", after=0,
                follow_timeout: float = 600.0) -> Iterator[result_pb2.EvalEvent]:
        """Follows a job until DONE: no deadline on the stream; a stream that breaks or ends early
        is reattached with Watch, for at most ``follow_timeout`` seconds of failures in a row."""
        backoff, broken_since = 0.2, None
        while True:
            if request is not None and not job_id:
                call = self._eval.Submit(request, metadata=self._metadata(), wait_for_ready=True,
                                         timeout=None)
            else:
                call = self._eval.Watch(
                    evaluation_pb2.WatchRequest(job_id=job_id, after_sequence=after),
                    metadata=self._metadata(), wait_for_ready=True)
            error = None
            try:
                for event in call:
                    backoff, broken_since = 0.2, None
                    job_id = job_id or event.job_id
                    if event.sequence <= after:
                        continue
                    after = event.sequence
                    yield event
                    if event.stage == DONE:
                        return
            except grpc.RpcError as e:
                if e.code() not in self._TRANSIENT or not job_id:
                    raise PkbError(e.code(), e.details()) from None
                error = e
            finally:
                call.cancel()
            # Broken, or ended before DONE (a coordinator shutting down): reattach.
            broken_since = broken_since or time.time()
            if time.time() - broken_since > follow_timeout:
                code = error.code() if error else grpc.StatusCode.UNAVAILABLE
                raise PkbError(code, f"job {job_id}: no DONE after {follow_timeout:.0f} s of "
                                     "reattaching; it may still run (watch it)")
            time.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    def get(self, job_id: str) -> evaluation_pb2.Job:
        return self._unary(self._eval.Get, evaluation_pb2.GetJobRequest(job_id=job_id))

    def cancel(self, job_id: str) -> evaluation_pb2.Job:
        return self._unary(self._eval.Cancel, evaluation_pb2.CancelRequest(job_id=job_id))

    def check(self, problem: Union[int, str], source: Union[str, bytes], world_size: int, *,
              dtype: str = "", language: str = "",
              compile: bool = False) -> evaluation_pb2.CheckAnswer:
        """The service's source policy (docs/security.md) on ``source``, answered by the
        coordinator in milliseconds: no job, no queue, no GPU. ``verdict`` is POLICY_OK, or POLICY
        with ``policy_findings`` (a submission would end REJECTED).

        With ``compile`` and a clean policy, the source is also compiled on a worker, sandboxed,
        as a submission is (seconds; at most 120 s; charged to the token's submission rate):
        ``compile_verdict`` is COMPILED, COMPILE_ERROR (``compile.diagnostics``, ``compile.log``)
        or NOT_COMPILED (``compile_message`` says why: no worker compiles the language, the
        worker was lost, the deadline passed)."""
        if isinstance(problem, str):
            problem = self.problem(problem).id
        if isinstance(source, str):
            source = source.encode("utf-8")
        return self._unary(self._eval.Check, evaluation_pb2.CheckRequest(
            problem_id=problem, world_size=world_size, source=source, dtype=dtype,
            language=language, compile=compile),
            timeout=max(self.timeout, 150.0) if compile else None)

    def problems(self) -> list:
        """Every problem's spec (pkb.v1.ProblemSpec), by id."""
        return list(self._unary(self._eval.ListProblems,
                                evaluation_pb2.ListProblemsRequest()).problems)

    def problem(self, which: Union[int, str]) -> problem_pb2.ProblemSpec:
        """One problem's full spec, by id or slug."""
        req = (evaluation_pb2.GetProblemRequest(slug=which) if isinstance(which, str)
               else evaluation_pb2.GetProblemRequest(id=which))
        return self._unary(self._eval.GetProblem, req)

    # --- Leaderboard --------------------------------------------------------------------------

    def leaderboard(self, *, by: str = "user", limit: int = 0,
                    **filters) -> leaderboard_pb2.LeaderboardAnswer:
        """Per board (problem, W, dtype, GPU class) the best result per user (or ``by="model"``).

        Filters: problem, world_size, gpu_class, dtype, submitter, model, agent, tag, since,
        until (unix seconds), seeds ("any", "public", "secret").
        """
        q = leaderboard_pb2.LeaderboardQuery(
            filter=_filter(**filters), limit=limit,
            group_by=leaderboard_pb2.GROUP_BY_MODEL if by == "model" else
            leaderboard_pb2.GROUP_BY_USER)
        return self._unary(self._board.Query, q)

    def suite(self, *, p: Iterable[float] = (), problems: Iterable[int] = (),
              **filters) -> leaderboard_pb2.SuiteAnswer:
        """fast_p (default p = 0, 1, 1.5, 2) and geomean speedup per model over the suite."""
        q = leaderboard_pb2.SuiteQuery(filter=_filter(**filters), p=list(p),
                                       problem_ids=list(problems))
        return self._unary(self._board.Suite, q)

    def submission(self, job_id: str, include_source: bool = False) -> leaderboard_pb2.Submission:
        """A submission's job (request, metadata, verdict), every event, and whether it ranks."""
        return self._unary(self._board.GetSubmission, leaderboard_pb2.GetSubmissionRequest(
            job_id=job_id, include_source=include_source))

    def submissions(self, *, done_only: bool = False, limit: int = 0, **filters) -> list:
        """Submission summaries, newest first (an agent token sees its own only)."""
        req = leaderboard_pb2.ListSubmissionsRequest(filter=_filter(**filters),
                                                     done_only=done_only, limit=limit)
        return list(self._unary(self._board.ListSubmissions, req).submissions)
