#!/usr/bin/env python3
"""Input parity with PKB: redraw every rank's inputs as PKB's Python does and compare them, byte
for byte, with the tensors that `pkb-eval -p ID -w W --dump-inputs DIR` wrote.

Each draw function below is written from the problem's entry in the shared catalog (which was
written from PKB's utils/input_output_tensors.py): the same seed formula, ops, shapes, dtypes,
device and order. `--device cuda` draws on the default CUDA generator (PKB's GPU run, and the GPU
build of pkb-eval); `--device cpu` draws on the CPU generator (the CPU build of pkb-eval).
nn.Linear weights always come from the CPU generator, as in PKB.

Usage:
  parity.py --device cuda --dumps ROOT      every sub-folder ROOT/p{ID}-w{W}-m{M}-n{N}-t{T}
  parity.py --device cpu --problem 13 --world 2 [--m M --n N --trial T] DIR
  parity.py --list                          the covered problem ids

Output: one line per tensor, "PARITY OK" or "PARITY BAD" with shape and dtype (and the first
differing element for BAD ones), then a summary. Exit status 1 if any tensor is BAD.
Non-tensor arguments (Python numbers, lists, groups) are not dumped and not checked. Tensor names
are the C++ dump's; for problems not yet ported they are PKB's variable names (a name mismatch
shows as "not in the dump" plus "dumped, but PKB has no such tensor").
"""
import argparse
import math
import os
import re
import sys

import torch

PROBLEMS = {}
# Tensors that the service draws differently from PKB on input sets t > 0, by design (stronger
# sets than PKB's fixed or weak inputs; see each problem's MakeInputs). On t > 0 they are reported
# as SKIP instead of being compared with PKB's trial t.
SERVICE_SETS = {}


def problem(pid, service_sets=()):
    def register(fn):
        PROBLEMS[pid] = fn
        if service_sets:
            SERVICE_SETS[pid] = set(service_sets)
        return fn
    return register


class Ctx:
    def __init__(self, pid, m, n, world, rank, trial, device, dtype):
        self.p, self.M, self.N, self.W, self.r, self.t = pid, m, n, world, rank, trial
        self.dev, self.dt = device, dtype

    def seed_value(self, pid=None, rank=None):
        pid = self.p if pid is None else pid
        rank = self.r if rank is None else rank
        return 42 + 1000 * pid + rank + 1000003 * self.t

    def seed(self, rank=None):
        """torch.manual_seed: seeds the CPU generator and every CUDA generator."""
        torch.manual_seed(self.seed_value(rank=rank))

    def randn(self, *shape, dtype=None):
        return torch.randn(shape, dtype=dtype or self.dt, device=self.dev)

    def zeros(self, *shape, dtype=None):
        return torch.zeros(shape, dtype=dtype or self.dt, device=self.dev)

    def full(self, shape, value, dtype=None):
        return torch.full(shape, value, dtype=dtype or self.dt, device=self.dev)

    def linear(self, fan_in, fan_out):
        # Default-initialized nn.Linear: created on the CPU in fp32 (weight, then bias, from the
        # CPU generator), then cast and moved.
        lin = torch.nn.Linear(fan_in, fan_out)
        lin = lin.to(device=self.dev, dtype=self.dt)
        return lin.weight.detach(), lin.bias.detach()


def round_up(x, m):
    return (x + m - 1) // m * m


def balanced_counts(c, total, world, experts=8):
    """(W, E/W) int64: total/E per slot, the first total mod E slots (row-major) one more."""
    flat = c.full((experts,), total // experts, dtype=torch.long)
    flat[: total % experts] += 1
    return flat.view(world, experts // world)


def distinct_experts(c, tokens, experts=8, k=2):
    """One randperm(experts) per token in token order, keeping the first k entries: (tokens, k)."""
    return torch.stack([torch.randperm(experts, device=c.dev)[:k] for _ in range(tokens)])


def attn_dims(c):
    return max(1, c.M // 64), max(1, c.N // 64), 8, 64


# ---------------------------------------------------------------- 1-8: collectives, no RNG

@problem(1, service_sets={"x"})
@problem(2, service_sets={"x"})
@problem(3, service_sets={"x"})
@problem(4, service_sets={"x"})
@problem(6, service_sets={"x"})
def p_filled(c):
    return [("x", c.full((c.M, c.N), float(c.r + 1)))]


@problem(5, service_sets={"x"})
def p005(c):
    if c.r == 0:
        return [("x", torch.stack([c.full((c.M, c.N), float(i + 1)) for i in range(c.W)]))]
    return [("x", c.zeros(c.M, c.N))]


@problem(7, service_sets={"x"})
def p007(c):
    return [("x", c.full((c.W * c.M, c.N), float(c.r + 1)))]


@problem(8, service_sets={"x"})
def p008(c):
    return [("x", torch.stack([c.full((c.M, c.N), float(10 * c.r + d)) for d in range(c.W)]))]


# ---------------------------------------------------------------- 9-30

@problem(9)
def p009(c):
    c.seed()
    x = c.randn(c.M, c.N)
    x_hat = x / (x.norm(dim=-1, keepdim=True) + 1e-5)  # in the dtype
    return [("X_hat", x_hat), ("dY", c.randn(c.M, c.N))]


@problem(10)
def p010(c):
    c.seed()
    shard = c.randn(c.M, c.N)  # drawn first, passed second
    idx = torch.randint(0, c.W * c.M, (c.M,), dtype=torch.long, device=c.dev)
    return [("indices", idx), ("local_shard", shard)]


@problem(11)
@problem(12)
def p011(c):
    c.seed()
    return [("A_local", c.randn(c.M, 512 // c.W)), ("B", c.randn(512, c.N))]


@problem(13)
def p013(c):
    c.seed()
    return [("A_local", c.randn(c.M, 512)), ("B_local", c.randn(512, c.N))]


@problem(14)
def p014(c):
    c.seed()
    return [("A", c.randn(c.M, 512)), ("B", c.randn(512, c.N // c.W))]


@problem(15)
def p015(c):
    c.seed()
    rows, hidden = round_up(c.M, c.W), round_up(256, c.W)
    return [("x_local", c.randn(rows, hidden // c.W)), ("W1", c.randn(hidden, 512)),
            ("W2", c.randn(512, hidden))]


@problem(16)
def p016(c):
    c.seed()
    return [("A_local", c.randn(c.M, 512 // c.W)), ("B_local", c.randn(512 // c.W, c.N))]


@problem(17)
def p017(c):
    c.seed()
    b, t, h, d = attn_dims(c)
    s = max(1, t // c.W)
    return [("q", c.randn(b, s, h, d)), ("k", c.randn(b, s, h, d)), ("cos", c.randn(b, s, d)),
            ("sin", c.randn(b, s, d))]


@problem(18)
def p018(c):
    c.seed()
    return [("h", c.randn(c.M, c.N)), ("weight", c.randn(c.N))]


@problem(19)
def p019(c):
    c.seed()
    return [("x", c.randn(c.M, c.N))]


@problem(20)
def p020(c):
    c.seed()
    return [("y", c.randn(c.W, c.M, c.N)), ("s", c.randn(c.W, c.M * c.N // 128))]


@problem(21)
def p021(c):
    c.seed()
    return [(f"grad_{i}", c.randn(c.M, c.N)) for i in range(3)]


@problem(22)
def p022(c):
    c.seed()
    return [("non_ep_grad", c.randn(c.M, c.N)), ("ep_grad", c.randn(c.M, c.N))]


@problem(23, service_sets={"grad_normalized_loss", "grad_loss_sum"})
def p023(c):
    c.seed()
    return [("loss", c.randn()),
            ("local_valid", torch.tensor(c.M * c.N, dtype=torch.long, device=c.dev)),
            ("global_valid", torch.tensor(c.W * c.M * c.N, dtype=torch.long, device=c.dev)),
            ("grad_normalized_loss", torch.ones((), dtype=c.dt, device=c.dev)),
            ("grad_loss_sum", c.zeros())]


@problem(24, service_sets={"gate_logits"})
def p024(c):
    c.seed()
    return [("gate_logits", c.randn(c.M, 8))]


@problem(25, service_sets={"hidden_states", "labels", "old_logprobs", "advantages"})
def p025(c):
    c.seed()
    v = 32000
    hidden = c.randn(c.M, c.N)
    weight = c.randn(v, c.N)
    labels = torch.randint(0, v, (c.M,), dtype=torch.long, device=c.dev)
    return [("hidden_states", hidden), ("weight", weight), ("labels", labels),
            ("old_logprobs", c.randn(c.M)), ("advantages", c.randn(c.M))]


@problem(26)
def p026(c):
    c.seed()
    sel = torch.randint(0, 8, (c.M, 2), device=c.dev)  # int64
    mask = torch.nn.functional.one_hot(sel, 8).float().permute(2, 1, 0)
    return [("expert_mask", mask)]


@problem(27)
def p027(c):
    c.seed()
    return [("local_tensor", c.randn(c.M, c.N))]


@problem(28)
def p028(c):
    c.seed()
    hidden = c.randn(c.M, c.N)
    picks = distinct_experts(c, c.M)  # (M, 2): slot 0, slot 1
    mask = torch.zeros((8, 2, c.M), dtype=torch.long, device=c.dev)
    tok = torch.arange(c.M, device=c.dev)
    for slot in range(2):
        mask[picks[:, slot], slot, tok] = 1
    mask = mask.float()
    routed = int((mask.sum(dim=1) > 0).sum().item())  # 2M: the two picks are distinct
    return [("hidden_states", hidden), ("expert_mask", mask),
            ("num_global_tokens_per_local_expert", balanced_counts(c, routed, c.W))]


@problem(29)
def p029(c):
    c.seed()
    picks = distinct_experts(c, c.M)
    rmap = torch.zeros((8, c.M), dtype=torch.bool, device=c.dev)
    tok = torch.arange(c.M, device=c.dev)
    for slot in range(2):
        rmap[picks[:, slot], tok] = True
    routed = int(rmap.sum().item())
    sel = torch.sort(picks, dim=1).values  # the token's two experts, ascending
    weights = torch.stack([c.randn(2).softmax(dim=0) for _ in range(c.M)])
    outputs = c.randn(routed, c.N)
    perm = rmap.nonzero()[:, 1].contiguous()  # tokens in expert-major order
    return [("expert_outputs", outputs), ("routing_weights", weights), ("selected_experts", sel),
            ("num_global_tokens_per_local_expert", balanced_counts(c, routed, c.W)),
            ("routing_map", rmap), ("local_input_permutation_mapping", perm)]


@problem(30)
def p030(c):
    c.seed()
    return [("grad_fc1_1_lora_A", c.randn(8, c.N)), ("grad_fc1_2_lora_A", c.randn(8, c.N)),
            ("grad_fc2_lora_B", c.randn(c.N, 8))]


# ---------------------------------------------------------------- 31-58

def moe_router_and_mlp(c, experts):
    """31/49/50/51: hidden, gate weight and bias on the run device, then three nn.Linear."""
    out = [("hidden_states", c.randn(c.M, c.N)), ("gate_weight", c.randn(experts, c.N)),
           ("gate_bias", c.randn(experts))]
    for name, fi, fo in (("gate_proj", c.N, 128), ("up_proj", c.N, 128), ("down_proj", 128, c.N)):
        w, b = c.linear(fi, fo)
        out += [(f"{name}.weight", w), (f"{name}.bias", b)]
    return out


@problem(31)
def p031(c):
    c.seed()
    return moe_router_and_mlp(c, 8)


@problem(32)
def p032(c):
    c.seed()
    out = moe_router_and_mlp(c, 8)
    for name, shape in (("lora_gate_A", (8, c.N)), ("lora_gate_B", (128, 8)),
                        ("lora_up_A", (8, c.N)), ("lora_up_B", (128, 8)),
                        ("lora_down_A", (8, 128)), ("lora_down_B", (c.N, 8))):
        out.append((name, c.randn(*shape)))
    return out


@problem(33)
@problem(34)
@problem(35)
def p033(c):
    c.seed()
    return [("x", c.randn(c.M, c.N))]


@problem(36)
@problem(37)
def p036(c):
    c.seed()
    return [("x", c.randn(*attn_dims(c)))]


@problem(38)
def p038(c):
    c.seed()
    b, t, h, d = attn_dims(c)
    return [("qkv_tensor", c.randn(b, t, 3 * h * d))]


@problem(39)
def p039(c):
    c.seed()
    b, t, h, d = attn_dims(c)
    s = max(1, t // c.W)
    return [("hidden_states", c.randn(b, s, h * d)), ("w_qkv", c.randn(3 * h * d, h * d)),
            ("w_o", c.randn(h * d, h * d))]


def mlp_dims_divisible(c):
    """41/42/47: (d_in, hid, d_out), hid grown until the parameter count divides by W."""
    d_in, hid, d_out = max(16, min(c.N, 256)), max(32, min(c.N // 2, 512)), max(8, min(c.N // 4, 256))
    while (hid * d_in + hid + d_out * hid + d_out) % c.W:
        hid += 1
    return d_in, hid, d_out


def mlp_data_and_params(c, d_in, hid, d_out):
    """40-42/47 (shared seed): X and y for all rows, this rank's rows; rank 0 draws the params."""
    n_tot = round_up(max(c.M, c.W), c.W)
    rows = n_tot // c.W
    x_full, y_full = c.randn(n_tot, d_in), c.randn(n_tot, d_out)
    sl = slice(c.r * rows, (c.r + 1) * rows)
    out = [("X_local", x_full[sl].contiguous()), ("y_local", y_full[sl].contiguous())]
    for name, shape in (("W1", (hid, d_in)), ("b1", (hid,)), ("W2", (d_out, hid)), ("b2", (d_out,))):
        out.append((name, c.randn(*shape) if c.r == 0 else c.zeros(*shape)))
    return out


@problem(40)
def p040(c):
    c.seed(rank=0)
    d_in, hid, d_out = max(16, min(c.N, 256)), max(32, min(c.N // 2, 512)), max(8, min(c.N // 4, 256))
    out = mlp_data_and_params(c, d_in, hid, d_out)
    shapes = [(hid, d_in), (hid,), (d_out, hid), (d_out,)]
    for moment in ("exp_avg", "exp_avg_sq"):
        for pname, shape in zip(("W1", "b1", "W2", "b2"), shapes):
            out.append((f"{moment}_{pname}", c.zeros(*shape)))
    return out


@problem(41)
@problem(42)
def p041(c):
    c.seed(rank=0)
    d_in, hid, d_out = mlp_dims_divisible(c)
    part = (hid * d_in + hid + d_out * hid + d_out) // c.W
    return mlp_data_and_params(c, d_in, hid, d_out) + [("exp_avg_part", c.zeros(part)),
                                                        ("exp_avg_sq_part", c.zeros(part))]


@problem(43)
def p043(c):
    c.seed(rank=0)
    p = max(64, min(c.M * 64, 4096))
    sl = slice(c.r * p, (c.r + 1) * p)
    grad = c.randn(p * c.W)[sl].contiguous()
    master = c.randn(p * c.W)[sl].contiguous()
    return [("grad_shard", grad), ("master_shard", master), ("exp_avg", c.zeros(p)),
            ("exp_avg_sq", c.zeros(p))]


@problem(44)
def p044(c):
    c.seed()
    return [("flat_grad", c.randn(max(c.M * c.N, 64 * c.W)))]


@problem(45)
def p045(c):
    hidden = max(32, min(c.N, 128))
    rows = max(2, max(c.M, c.W) // max(c.W, 4))
    c.seed(rank=0)
    gamma = c.randn(hidden)
    c.seed()
    return [("rs_input", c.randn(rows * hidden * c.W)), ("gamma", gamma)]


@problem(46)
def p046(c):
    c.seed(rank=0)
    tokens = max(1, min(8, c.M // 1024))
    hidden = max(128, min(c.N, 4096))
    vocab = round_up(max(c.M, c.W * 1024), c.W)
    local = vocab // c.W
    sl = slice(c.r * local, (c.r + 1) * local)
    h = c.randn(tokens, hidden)
    w = c.randn(vocab, hidden)[sl].contiguous()
    b = c.randn(vocab)[sl].contiguous()
    return [("hidden_states", h), ("weight_shard", w), ("bias_shard", b)]


@problem(47)
def p047(c):
    c.seed(rank=0)
    d_in, hid, d_out = mlp_dims_divisible(c)
    part = (hid * d_in + hid + d_out * hid + d_out) // c.W
    data = mlp_data_and_params(c, d_in, hid, d_out)
    flat = torch.cat([t.reshape(-1) for _, t in data[2:]])
    return data[:2] + [("flat_param_shard", flat[c.r * part:(c.r + 1) * part].contiguous()),
                       ("exp_avg_shard", c.zeros(part)), ("exp_avg_sq_shard", c.zeros(part))]


def tp_fsdp(world):
    for n_tp in range(2, world):
        if world % n_tp == 0 and world // n_tp >= 2:
            return n_tp, world // n_tp
    return 1, world


@problem(48)
def p048(c):
    c.seed(rank=0)
    n_tp, n_fsdp = tp_fsdp(c.W)
    d = round_up(max(32, min(c.N, 256)), math.lcm(n_tp, n_fsdp))
    f = round_up(max(64, c.M), n_tp)
    b_tot = round_up(max(2 * c.M, 2 * c.W), n_fsdp)
    bf = b_tot // n_fsdp
    tp_rank, fsdp_rank = c.r % n_tp, c.r // n_tp
    x = c.randn(b_tot, d)[fsdp_rank * bf:(fsdp_rank + 1) * bf].contiguous()
    w1, w2, w3 = c.randn(d, f), c.randn(d, f), c.randn(f, d)
    dr, dc = d // n_fsdp, f // n_tp
    cols = slice(tp_rank * dc, (tp_rank + 1) * dc)
    rows = slice(fsdp_rank * dr, (fsdp_rank + 1) * dr)
    return [("x_local", x), ("W1_shard", w1[rows, cols].contiguous()),
            ("W2_shard", w2[rows, cols].contiguous()), ("W3_shard", w3[cols, rows].contiguous())]


@problem(49)
def p049(c):
    c.seed()
    return moe_router_and_mlp(c, max(1, c.W))


@problem(50)
def p050(c):
    c.seed()
    return moe_router_and_mlp(c, 2 * c.W)


@problem(51)
def p051(c):
    c.seed()
    e = next((e for e in range(c.W // 2, 1, -1) if c.W % e == 0), 1)
    return moe_router_and_mlp(c, e)


@problem(52)
def p052(c):
    c.seed()
    p = max(64, min(c.M * 64, 4096))
    return [("flat_grads", c.randn(p * c.W)),
            ("amax_history", c.full((16,), 1e-8, dtype=torch.bfloat16))]


@problem(53)
def p053(c):
    c.seed()
    p = max(64, min(c.M * 64, 4096))
    return [("flat_param_shard", c.randn(p)),
            ("amax_history", c.full((16,), 1e-8, dtype=torch.bfloat16))]


@problem(54)
def p054(c):
    c.seed()
    b, t, h, d = attn_dims(c)  # B and T follow M and N
    s = max(1, t // c.W)
    return [("q", c.randn(b, s, h, d)), ("k", c.randn(b, s, h, d)), ("v", c.randn(b, s, h, d))]


def reseed(c, value):
    torch.manual_seed(value + 1000003 * c.t)


@problem(55)
def p055(c):
    # TP groups are contiguous pairs, CP groups strided (Megatron 'tp-cp'). Seeds use 56.
    tp = min(2, c.W)
    cp = c.W // tp
    tp_rank, cp_rank = c.r % tp, c.r // tp
    b, t = max(1, c.M // 64), max(1, c.N // 64)
    s, hl = max(1, t // cp), 8 // tp
    reseed(c, 42 + 56000 + cp_rank)
    hidden = c.randn(b, s, 512)
    reseed(c, 42 + 56000 + 10000 + tp_rank)
    w_qkv = c.randn(3 * hl * 64, 512) * 0.02
    w_o = c.randn(512, hl * 64) * 0.02
    return [("hidden_states", hidden), ("w_qkv", w_qkv), ("w_o", w_o)]


@problem(56)
def p056(c):
    # CP groups are contiguous stage blocks, PP groups strided. Seeds use 57.
    pp = min(2, c.W)
    cp = c.W // pp
    cp_rank, pp_rank = c.r % cp, c.r // cp
    b, t = max(1, c.M // 64), max(1, c.N // 64)
    s = max(1, t // cp)
    reseed(c, 42 + 57000 + cp_rank)
    hidden = c.randn(b, s, 512)
    reseed(c, 42 + 57000 + 20000 + pp_rank)
    w_qkv = c.randn(1536, 512) * 0.02
    w_o = c.randn(512, 512) * 0.02
    return [("hidden_states", hidden), ("w_qkv", w_qkv), ("w_o", w_o)]


@problem(57)
def p057(c):
    # DP groups strided, CP groups contiguous (Megatron 'cp-dp'). Seeds use 58.
    b, t, h, d = attn_dims(c)
    dp = min(2, c.W)
    cp = c.W // dp
    cp_rank, dp_rank = c.r % cp, c.r // cp
    s = max(1, t // cp)
    reseed(c, 42 + 58000 + 100 * dp_rank + cp_rank)
    q, k, v, dout = (c.randn(b, s, h, d) for _ in range(4))
    qh, kh, vh = (x.transpose(1, 2).float() for x in (q, k, v))
    scores = torch.matmul(qh, kh.transpose(-2, -1)) * (d ** -0.5)
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.matmul(torch.softmax(scores, dim=-1), vh).transpose(1, 2).contiguous().to(c.dt)
    return [("dout", dout), ("q", q), ("k", k), ("v", v), ("out", out), ("softmax_lse", lse)]


@problem(58)
def p058(c):
    c.seed()
    b, d = max(1, c.M // max(c.W, 1)), max(16, c.N)
    img, txt = c.randn(b, d), c.randn(b, d)
    norm = torch.nn.functional.normalize
    return [("image_features", norm(img, dim=-1).contiguous()),
            ("text_features", norm(txt, dim=-1).contiguous())]


@problem(59)
def p059(c):
    c.seed(rank=0)  # shared seed: one global field, each rank passes its column slab
    b, h, l = max(1, c.M // 64), round_up(max(16, c.M), c.W), round_up(max(16, c.N), c.W)
    lw = l // c.W
    field = c.randn(b, h, l, dtype=torch.float32)
    return [("x", field[:, :, c.r * lw:(c.r + 1) * lw].contiguous())]


@problem(60)
def p060(c):
    # PKB's sizes are fixed (2 x 10 x 720 x 1440); parity runs at M = N = 1024 where ours are too.
    c.seed(rank=0)
    hw = 720 // c.W
    field = c.randn(2, 10, 720, 1440, dtype=torch.float32)
    spectrum = torch.fft.rfft2(field, s=(720, 1440), dim=(-2, -1), norm="ortho")
    return [("x", spectrum[:, :, c.r * hw:(c.r + 1) * hw, :].contiguous())]


@problem(61, service_sets=["means", "viewmats"])
def p061(c):
    c.seed()
    n = max(1000, min(c.M, 10000))
    iw, ih = max(64, min(c.N, 512)), max(64, min(c.M, 512))
    bf = torch.bfloat16
    means = torch.empty(n, 3, dtype=bf, device=c.dev)
    means[:, 0] = (torch.rand(n, dtype=bf, device=c.dev) - 0.5) * 1.5
    means[:, 1] = (torch.rand(n, dtype=bf, device=c.dev) - 0.5) * 1.5
    means[:, 2] = torch.rand(n, dtype=bf, device=c.dev) * 2 + 2
    quats = torch.randn(n, 4, dtype=bf, device=c.dev)
    scales = torch.rand(n, 3, dtype=bf, device=c.dev) * 0.02
    opacities = torch.rand(n, dtype=bf, device=c.dev) * 0.8 + 0.1
    colors = torch.rand(n, 3, dtype=bf, device=c.dev)
    viewmats = torch.eye(4, dtype=bf, device=c.dev).reshape(1, 4, 4)
    f = 0.8 * min(iw, ih)
    ks = torch.tensor([[f, 0, iw / 2], [0, f, ih / 2], [0, 0, 1]], dtype=bf,
                      device=c.dev).reshape(1, 3, 3)
    return [("means", means), ("quats", quats), ("scales", scales), ("opacities", opacities),
            ("colors", colors), ("viewmats", viewmats), ("Ks", ks)]


@problem(62)
def p062(c):
    c.seed()
    az = 2 if c.W % 2 == 0 else 1
    polar = c.W // az
    nlat = round_up(128, polar)  # PKB's fixed grid (parity runs at M = N = 1024)
    nlon = round_up(2 * nlat, az)
    lat_l, lon_l = nlat // polar, nlon // az
    f32 = torch.float32
    x = c.randn(32, 8, lat_l, lon_l, dtype=f32)
    weight = c.randn(8, 8, 3, dtype=f32)
    bias = c.randn(8, dtype=f32)
    nnz = 3 * nlat * 4
    vals = c.randn(nnz, dtype=f32) * 0.05
    p = c.r // az
    rows = []
    for k in range(3):
        for o in range(nlat):
            ell = (o - p * lat_l) % lat_l
            for e in range(4):
                rows.append((k, o, ell * nlon + (o + e * (k + 1)) % nlon))
    idx = torch.tensor(rows, dtype=torch.int64, device=c.dev).t()
    psi = torch.sparse_coo_tensor(idx, vals, (3, nlat, lat_l * nlon)).coalesce()
    return [("x", x), ("psi_indices", psi.indices()), ("psi_values", psi.values()),
            ("weight", weight), ("bias", bias)]


@problem(63, service_sets=[f"P_{i}" for i in range(8)])
def p063(c):
    c.seed()
    f64 = torch.float64
    h, w, p = [], [], []
    for _ in range(8):
        h.append(c.randn(1024, 1, dtype=f64) * 0.01)
        w.append(c.randn(1024, 1, dtype=f64))
        p.append(torch.eye(1024, dtype=f64, device=c.dev))
    err = torch.randn((), dtype=f64, device=c.dev)
    return ([(f"H_{i}", h[i]) for i in range(8)] + [("error", err)] +
            [(f"weights_{i}", w[i]) for i in range(8)] + [(f"P_{i}", p[i]) for i in range(8)])


def exchange_dims(c):
    p = max(64, min(c.M // c.W, 1024))
    return p, max(8, min(c.N, 128)), p * c.W


@problem(64, service_sets=["seed_nodes", "colptr", "row", "node_to_rank"])
def p064(c):
    # No RNG in PKB's inputs (the shared seed is set but unused).
    nodes = round_up(max(10000, min(c.M, 100000)), c.W)
    s = max(512, min(c.N // c.W, 2048))
    ar = torch.arange(nodes, dtype=torch.int64, device=c.dev)
    row = ((ar.unsqueeze(1) + torch.arange(1, 17, device=c.dev)) % nodes).reshape(-1)
    seeds = (c.r * s + torch.arange(s, dtype=torch.int64, device=c.dev)) % nodes
    colptr = torch.arange(nodes + 1, dtype=torch.int64, device=c.dev) * 16
    return [("seed_nodes", seeds), ("colptr", colptr), ("row", row), ("node_to_rank", ar % c.W)]


@problem(65)
def p065(c):
    c.seed()
    _, hd, t = exchange_dims(c)
    sd = max(1, t * 3 // 4)
    feats = c.randn(sd, hd)
    ids = torch.randint(0, sd, (t,), device=c.dev)
    return [("local_features", feats), ("seed_inverse_ids", ids)]


@problem(66)
def p066(c):
    c.seed()
    _, hd, t = exchange_dims(c)
    sd = max(1, t // 2)
    grad = c.randn(t, hd, dtype=torch.float32)
    ids = torch.randint(0, sd, (t,), device=c.dev)
    return [("grad_output", grad), ("seed_inverse_ids", ids)]


@problem(67)
def p067(c):
    c.seed()
    nodes = round_up(max(100000, c.M), c.W)
    nnz = max(1024, min(c.M // c.W, 50000))
    hd = max(8, min(c.N, 128))
    idx = torch.randint(0, nodes, (nnz,), device=c.dev)
    return [("idx", idx), ("value", c.randn(nnz, hd))]


@problem(68)
def p068(c):
    # PKB's table is 111M rows (28 GB per rank at W = 2): parity runs at M = 256, where the
    # service's documented rule below M = 1024 gives 512 M rows and 16 M queries.
    c.seed()
    small = c.M < 1024
    ntot = round_up(max(512 * c.M if small else 111000000, c.M), c.W)
    sh = ntot // c.W
    e = 256 if c.N >= 256 else (128 if c.N >= 128 else c.N)
    q = max(16 * c.M if small else 20000, min(c.M // c.W, 200000))
    shard = c.randn(sh, e)
    proj = c.randn(e, e)
    i = torch.arange(q, dtype=torch.int64, device=c.dev)
    ids = ((i + c.r) % c.W) * sh + (7 * i + c.r) % sh
    return [("local_embedding_shard", shard), ("input_node_ids", ids), ("proj_matrix", proj)]


@problem(69)
def p069(c):
    c.seed()
    p = max(16, min(c.M // c.W, 1280)) + c.r % 3
    nn = max(100, min(c.N, 1000))
    return [("local_pos_scores", c.randn(p)), ("local_neg_scores", c.randn(p, nn))]


@problem(70)
def p070(c):
    c.seed()
    ks = [1 + d % 3 for d in range(c.W)]
    b = max(512, min(c.M // c.W, 1024))
    lengths = torch.randint(5, 21, (sum(ks), b), device=c.dev).reshape(-1)
    values = torch.randint(0, 1000000, (int(lengths.sum().item()),), device=c.dev)
    return [("lengths", lengths), ("values", values)]


@problem(71)
def p071(c):
    c.seed()
    return [("x", c.randn(1, 1024, 2048)), ("weight", c.randn(1024, 1, 7))]


@problem(72, service_sets=["h", "conv_bias"])
def p072(c):
    c.seed()
    ch, chunk = 1024, 1024  # PKB's fixed sizes (parity runs at M = N = 1024)
    filt = 4 * chunk
    xs = [(name, c.randn(1, ch, 2 * chunk)) for name in ("x1", "x2", "v")]
    bf16 = torch.bfloat16
    h = (torch.arange(ch * filt, dtype=bf16, device=c.dev).reshape(ch, filt) / filt).to(c.dt)
    bias = (torch.arange(ch, dtype=bf16, device=c.dev) / ch).to(c.dt)
    return xs + [("h", h), ("conv_bias", bias)]


@problem(73)
def p073(c):
    c.seed()
    logits = c.randn(8, 1024, 512 // c.W)
    tokens = torch.arange(8 * 1024, dtype=torch.int64, device=c.dev)
    target = ((tokens * 13 + 7 + c.t) % 512).reshape(8, 1024)
    return [("vocab_parallel_logits", logits), ("target", target)]


@problem(74, service_sets=["g"])
def p074(c):
    c.seed()
    key = max(1, min(c.M, 1024) // 8)  # 128 at PKB's M = N = 1024
    value = max(1, min(c.N, 1024) // 8)
    q, k = c.randn(1, 64, 16, key), c.randn(1, 64, 16, key)
    v, g = c.randn(1, 64, 16, value), c.randn(1, 64, 16, key)
    beta = c.randn(1, 64, 16)
    bf16 = torch.bfloat16
    a_log = torch.linspace(-0.1, 0.1, 16, dtype=bf16, device=c.dev)
    dt_bias = torch.linspace(-0.1, 0.1, 16 * key, dtype=bf16, device=c.dev)
    return [("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta), ("a_log", a_log),
            ("dt_bias", dt_bias)]


@problem(75)
def p075(c):
    c.seed()
    h = round_up(6, c.W)
    hl = h // c.W
    key, value = max(1, min(c.M, 1024) // 4), max(1, min(c.N, 1024) // 2)  # PKB's 256, 512
    q, k = c.randn(1, 64, h, key), c.randn(1, 64, h, key)
    v = c.randn(1, 64, h, value)
    gate = c.randn(1, 64, h)
    beta = torch.randn(1, 64, h, dtype=torch.bfloat16, device=c.dev).sigmoid().to(c.dt)
    bf16 = torch.bfloat16
    a = torch.linspace(0, 0.2, h, dtype=bf16, device=c.dev)[c.r * hl:(c.r + 1) * hl]
    dt_b = torch.linspace(-0.1, 0.1, h, dtype=bf16, device=c.dev)[c.r * hl:(c.r + 1) * hl]
    return [("q", q), ("k", k), ("v", v), ("gate", gate), ("beta", beta),
            ("a_log", a.contiguous()), ("dt_bias", dt_b.contiguous())]


@problem(76)
def p076(c):
    c.seed()
    cout = next((x for x in (512, 256, 128) if x % c.W == 0), 512)
    cl = cout // c.W
    x = c.randn(1, cl, 19, 66, 66)
    weight = c.randn(cout, cl, 3, 3, 3)
    bias = torch.linspace(-0.1, 0.1, cout, dtype=c.dt, device=c.dev)
    return [("x", x), ("weight", weight), ("bias", bias)]


@problem(80)
def p080(c):
    c.seed()
    b = c.M if c.M < 512 else min(c.M, 1024)  # PKB's max(512, min(M, 1024)) from M = 512 on
    kp = 32 * c.M if c.M < 512 else 16384
    teacher = c.randn(b, kp, dtype=torch.float32) * 0.01
    return [("teacher_output", teacher),
            ("n_masked_patches_tensor", torch.full((1,), b, dtype=torch.int64, device=c.dev))]


@problem(81, service_sets=["low_res_masks_local", "obj_scores_local"])
def p081(c):
    c.seed()
    counts = [1 + (i + c.t) % 3 for i in range(c.W)]
    n = counts[c.r]
    side = 256  # PKB's masks (parity runs at M = 1024)
    masks = c.randn(n, side, side)
    y = torch.arange(side, device=c.dev).view(1, side, 1)
    x = torch.arange(side, device=c.dev).view(1, 1, side)
    i = torch.arange(n, device=c.dev).view(n, 1, 1)
    pat = ((y + x + i + c.r) % 5 == 0).to(c.dt)
    masks = masks + 4 * pat - 1
    scores = torch.linspace(-5, 5, n, dtype=c.dt, device=c.dev)
    last = torch.arange(sum(counts), dtype=torch.int64, device=c.dev) % 5 - 1
    return [("low_res_masks_local", masks), ("obj_scores_local", scores),
            ("last_occluded", last)]


def topk_inputs(c, mult, add):
    c.seed()
    bt = max(1, min(c.M // 512, 4))
    seq = round_up(max(c.W, min(c.M // 128, 32)), c.W)
    vl = 256 // c.W
    logits = c.randn(bt, seq, vl)
    tokens = torch.arange(bt * seq, dtype=torch.int64, device=c.dev)
    target = ((tokens * mult + add + c.t) % 256).reshape(bt, seq)
    vocab = torch.arange(vl, device=c.dev) + c.r * vl
    logits = logits + (vocab.view(1, 1, -1) == target.unsqueeze(-1)).to(c.dt) * 8
    return [("vocab_parallel_logits", logits), ("target", target)]


@problem(82, service_sets=["vocab_parallel_logits"])
def p082(c):
    return topk_inputs(c, 17, 3)


@problem(83, service_sets=["vocab_parallel_logits"])
def p083(c):
    return topk_inputs(c, 19, 5)


@problem(84, service_sets=["vocab_parallel_logits"])
def p084(c):
    ins = topk_inputs(c, 19, 5)
    bt, seq = ins[1][1].shape
    grad = torch.linspace(-1, 1, bt * seq, dtype=torch.bfloat16, device=c.dev).reshape(bt, seq)
    return ins + [("grad_output", grad)]


@problem(85)
def p085(c):
    c.seed()
    n = max(4 * c.W, min(c.M // c.W, 4096))
    if c.t % 4 == 3 and c.r % 2 == 1:
        n = 0
    values = torch.randint(-50, 50, (n,), device=c.dev).to(c.dt) - c.r * max(1, n)
    return [("local_shard", values)]


@problem(77, service_sets=["query"])
def p077(c):
    c.seed()
    hq, lc = (24, 12150) if c.W <= 4 else (48, 21600)
    if hq % c.W:
        hq = c.W * max(1, hq // c.W)
    hkv = 8 if (8 % c.W == 0 or c.W % 8 == 0) else c.W
    lc = max(1, lc * min(c.N, 1024) // 1024)
    t = 4 * ((lc + c.W - 1) // c.W)
    da = torch.bfloat16 if c.dt in (torch.bfloat16, torch.float16) else c.dt
    query = torch.randn(t, hq, 128, dtype=da, device=c.dev)
    key = torch.randn(t, hkv, 128, dtype=da, device=c.dev)
    value = torch.randn_like(key)
    starts = torch.arange(4, dtype=torch.int64, device=c.dev) * lc
    return [("query", query), ("key_value", torch.cat([key, value], -1)),
            ("k_ranges", torch.stack([starts, starts + lc], 1))]


@problem(78)
def p078(c):
    c.seed()
    return [("z", c.randn(1, 16, 6, 90, 90, dtype=torch.bfloat16))]  # PKB's fixed latent


@problem(79)
def p079(c):
    c.seed()
    q = max(32, min(c.M // 64, 256))
    nt = max(1024, min(16 * c.N // c.W, 16384))
    df = 1024 if c.N >= 8192 else 768 if c.N >= 4096 else 384
    norm = torch.nn.functional.normalize
    test = norm(c.randn(q, df, dtype=torch.bfloat16), dim=1)
    train = norm(c.randn(nt, df, dtype=torch.bfloat16), dim=1)
    labels = ((c.r * nt + torch.arange(nt, device=c.dev)) % 1000).view(1, nt)
    return [("test", test.to(c.dt).contiguous()), ("train_t", train.to(c.dt).t().contiguous()),
            ("labels", labels)]


@problem(86)
def p086(c):
    c.seed()
    cg = round_up(512 if c.N < 4096 else 1024, c.W)
    x = c.randn(512, cg // c.W, dtype=torch.bfloat16) + 0.01 * c.r
    return [("x", x)]


@problem(87)
def p087(c):
    c.seed()
    ch = (320, 640, 1280)[min(c.N // 512, 2)]
    hl = max(3, 128 // max(1, c.W // 2))
    return [("x", c.randn(1, ch, hl, 128)), ("weight", c.randn(ch, ch, 3, 3)),
            ("bias", c.randn(ch))]


# ---------------------------------------------------------------- comparison

INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def as_ints(t):
    t = t.detach().cpu().contiguous().reshape(-1)
    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    return t.view(INT_OF_SIZE[t.element_size()])


def compare(name, mine, dumped):
    """(ok, text)."""
    desc = f"{tuple(mine.shape)} {str(mine.dtype).replace('torch.', '')}"
    if mine.dtype != dumped.dtype or mine.shape != dumped.shape:
        return False, (f"{desc}: dump has {tuple(dumped.shape)} "
                       f"{str(dumped.dtype).replace('torch.', '')}")
    a, b = as_ints(mine), as_ints(dumped)
    diff = (a != b).nonzero()
    if diff.numel() == 0:
        return True, desc
    i = int(diff[0])
    idx = tuple(int(x) for x in torch.unravel_index(torch.tensor(i), tuple(mine.shape))) \
        if mine.dim() else ()
    ma = mine.detach().cpu().contiguous().reshape(-1)[i]
    mb = dumped.contiguous().reshape(-1)[i]
    return False, (f"{desc}: {diff.numel()} of {a.numel()} elements differ, first at {list(idx)}: "
                   f"python {ma.item()!r} vs dump {mb.item()!r}")


def check_dir(path, pid, world, m, n, trial, device, dtype, totals):
    files = sorted(os.listdir(path))
    dumped_names = {}
    for f in files:
        mt = re.fullmatch(r"rank(\d+)\.input\.(.+)\.pt", f)
        if mt:
            dumped_names.setdefault(int(mt.group(1)), []).append(mt.group(2))
    tag = f"p{pid} W={world} M={m} N={n} t={trial}"
    if pid not in PROBLEMS:
        print(f"PARITY BAD  {tag}: no Python draw for problem {pid}")
        totals["bad"] += 1
        return
    if sorted(dumped_names) != list(range(world)):
        print(f"PARITY BAD  {tag}: dump has ranks {sorted(dumped_names)}, expected 0..{world - 1}")
        totals["bad"] += 1
    for r in range(world):
        ctx = Ctx(pid, m, n, world, r, trial, device, dtype)
        drawn = PROBLEMS[pid](ctx)
        mine_names = [nm for nm, _ in drawn]
        for nm, t in drawn:
            label = f"{tag} rank{r} {nm}"
            fp = os.path.join(path, f"rank{r}.input.{nm}.pt")
            if trial > 0 and nm in SERVICE_SETS.get(pid, ()):
                print(f"PARITY SKIP {label}: the service draws its own set {trial} here by design")
                totals["skip"] += 1
                continue
            if not os.path.exists(fp):
                print(f"PARITY BAD  {label} {tuple(t.shape)} {t.dtype}: not in the dump")
                totals["bad"] += 1
                continue
            ok, text = compare(nm, t, torch.load(fp, map_location="cpu"))
            print(f"PARITY {'OK ' if ok else 'BAD'} {label} {text}")
            totals["ok" if ok else "bad"] += 1
        for nm in dumped_names.get(r, []):
            if nm not in mine_names:
                print(f"PARITY BAD  {tag} rank{r} {nm}: dumped, but PKB has no such tensor")
                totals["bad"] += 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", nargs="?", help="one dump folder (with --problem and --world)")
    ap.add_argument("--dumps", help="folder of dump folders named p{ID}-w{W}-m{M}-n{N}-t{T}")
    ap.add_argument("--device", default="cuda", help="cuda (PKB's GPU draws) or cpu")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--problem", type=int)
    ap.add_argument("--world", type=int)
    ap.add_argument("--m", type=int, default=1024)
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--trial", type=int, default=0, help="pkb-eval --set-offset of the dump")
    ap.add_argument("--list", action="store_true", help="print the covered problem ids")
    a = ap.parse_args()
    if a.list:
        print(" ".join(str(p) for p in sorted(PROBLEMS)))
        return 0
    device = torch.device("cuda", 0) if a.device == "cuda" else torch.device(a.device)
    dtype = getattr(torch, a.dtype)
    runs = []
    if a.dumps:
        for d in sorted(os.listdir(a.dumps)):
            mt = re.fullmatch(r"p(\d+)-w(\d+)-m(\d+)-n(\d+)-t(\d+)", d)
            if mt:
                runs.append((os.path.join(a.dumps, d),) + tuple(int(g) for g in mt.groups()))
            else:
                print(f"(ignoring {d}: not p{{ID}}-w{{W}}-m{{M}}-n{{N}}-t{{T}})")
        runs.sort(key=lambda x: x[1:])
    if a.dir:
        if a.problem is None or a.world is None:
            ap.error("a single dump folder needs --problem and --world")
        runs.append((a.dir, a.problem, a.world, a.m, a.n, a.trial))
    if not runs:
        ap.error("nothing to check: give --dumps ROOT or a folder")
    totals = {"ok": 0, "bad": 0, "skip": 0}
    for path, pid, world, m, n, trial in runs:
        check_dir(path, pid, world, m, n, trial, device, dtype, totals)
    covered = sorted({r[1] for r in runs})
    print(f"PARITY SUMMARY device={a.device}: {totals['ok']} OK, {totals['bad']} BAD, "
          f"{totals['skip']} SKIP over {len(runs)} dumps (problems {' '.join(map(str, covered))})")
    return 1 if totals["bad"] else 0


if __name__ == "__main__":
    sys.exit(main())
