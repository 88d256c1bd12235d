"""The common machinery of the input-parity redraws (scripts/device/parity.py): the registry,
the draw context with PKB's seed formula, and the helpers that several problems' redraws share.

Each problem's redraw sits beside its .cc, problems/<family>/pNNN_<slug>.parity.py, and registers
itself with @problem(ID): written from the problem's entry in the shared catalog (which was written
from PKB's utils/input_output_tensors.py), with the same seed formula, ops, shapes, dtypes, device
and order. nn.Linear weights always come from the CPU generator, as in PKB.
"""
import torch

PROBLEMS = {}
# Tensors that the service draws differently from PKB on input sets t > 0, by design (stronger
# sets than PKB's fixed or weak inputs; see each problem's MakeInputs). On t > 0 they are reported
# as SKIP instead of being compared with PKB's trial t.
SERVICE_SETS = {}


# step-parity.sh's dumps of each problem: at W = 2 (W = 1 where it cannot run at W = 2), trial 0,
# at its `shape`, plus the (world, trial) pairs in `also`.
PLANS = {}


def problem(pid, service_sets=(), shape=(256, 256), also=()):
    """Registers a redraw. `shape` is the dumps' M, N: small where the inputs follow M and N, PKB's
    defaults where its sizes are fixed. `also`: more (world, trial) dumps, for problems whose
    ranks differ in role or layout (W = 4) or to check the seed's trial term."""
    def register(fn):
        if pid in PROBLEMS:
            raise ValueError(f"problem {pid} has two redraws")
        PROBLEMS[pid] = fn
        PLANS[pid] = (shape, tuple(also))
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


def moe_router_and_mlp(c, experts):
    """31/49/50/51: hidden, gate weight and bias on the run device, then three nn.Linear."""
    out = [("hidden_states", c.randn(c.M, c.N)), ("gate_weight", c.randn(experts, c.N)),
           ("gate_bias", c.randn(experts))]
    for name, fi, fo in (("gate_proj", c.N, 128), ("up_proj", c.N, 128), ("down_proj", 128, c.N)):
        w, b = c.linear(fi, fo)
        out += [(f"{name}.weight", w), (f"{name}.bias", b)]
    return out


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


def tp_fsdp(world):
    for n_tp in range(2, world):
        if world % n_tp == 0 and world // n_tp >= 2:
            return n_tp, world // n_tp
    return 1, world


def reseed(c, value):
    torch.manual_seed(value + 1000003 * c.t)


def exchange_dims(c):
    p = max(64, min(c.M // c.W, 1024))
    return p, max(8, min(c.N, 128)), p * c.W


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


# Problems 1-4 and 6: one (M, N) tensor filled with rank + 1.
def filled_with_rank(c):
    return [("x", c.full((c.M, c.N), float(c.r + 1)))]


# Problems 11 and 12: A_local (M, 512 / W) and B (512, N).
def allgather_gemm_inputs(c):
    c.seed()
    return [("A_local", c.randn(c.M, 512 // c.W)), ("B", c.randn(512, c.N))]


# Problems 33-35: x = randn(M, N).
def randn_m_by_n(c):
    c.seed()
    return [("x", c.randn(c.M, c.N))]


# Problems 36 and 37: x = randn(B, T, H, D) at PKB's attention sizes.
def randn_attention_dims(c):
    c.seed()
    return [("x", c.randn(*attn_dims(c)))]


# Problems 41 and 42 (ZeRO-1, ZeRO-2): the MLP from the shared seed, zero moments.
def zero_mlp_inputs(c):
    c.seed(rank=0)
    d_in, hid, d_out = mlp_dims_divisible(c)
    part = (hid * d_in + hid + d_out * hid + d_out) // c.W
    return mlp_data_and_params(c, d_in, hid, d_out) + [("exp_avg_part", c.zeros(part)),
                                                        ("exp_avg_sq_part", c.zeros(part))]
