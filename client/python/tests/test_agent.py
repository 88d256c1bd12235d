"""The agent helpers on results built here (no coordinator needed)."""
from pkb.agent import feedback_from
from pkb.v1 import profile_pb2, result_pb2


def _result_with_profile():
    r = result_pb2.EvalResult(status=result_pb2.OK, message="ok")
    p = r.profiles.add(rank=0)
    p.candidate.span_us = 6.0
    p.candidate.busy_us = 5.5
    p.candidate.records.add(kind=profile_pb2.ProfileRecord.KERNEL, name="short", start_us=0,
                            duration_us=0.5, grid=[1, 1, 1], block=[32, 1, 1])
    p.candidate.records.add(kind=profile_pb2.ProfileRecord.KERNEL, name="allreduce_kernel",
                            start_us=1, duration_us=5, grid=[132, 1, 1], block=[512, 1, 1],
                            registers_per_thread=40, shared_memory_bytes=1024)
    p.reference.note = "no GPU profile on this device"
    return r


def test_feedback_lists_the_profile_longest_record_first():
    lines = feedback_from(_result_with_profile()).splitlines()
    head = [i for i, l in enumerate(lines) if l.startswith("profile of the candidate")]
    assert head, lines
    i = head[0]
    assert "2 records in 6.00 us, busy 5.50 us" in lines[i]
    assert "allreduce_kernel" in lines[i + 1] and "grid 132x1x1 block 512x1x1" in lines[i + 1]
    assert "40 regs, 1024 B shared" in lines[i + 1]
    assert "short" in lines[i + 2]
    assert "profile of the reference: no GPU profile on this device" in lines


def test_feedback_without_profile_says_nothing_of_it():
    r = result_pb2.EvalResult(status=result_pb2.OK, message="ok")
    assert "profile" not in feedback_from(r)
