#!/usr/bin/env bash
# Can NCCL run W ranks on one GPU when each rank poses as a host of its own (NCCL_HOSTID per rank:
# no "Duplicate GPU", the ranks talk over the socket transport on loopback)? torch.distributed
# with the NCCL backend, W = 2 and 4 processes on GPU 0, one all-reduce and one all-gather each,
# checked. Probes whether functional runs could give candidates an NCCL communicator.
#   step-ncclhosts.sh BIN OUT
set -uo pipefail
# torch.multiprocessing's spawn re-imports the main script: it must be a file, not stdin.
script=$(mktemp --suffix=.py)
trap 'rm -f "$script"' EXIT
cat > "$script" <<'PY'
import os, sys, tempfile, time
import torch, torch.distributed as dist, torch.multiprocessing as mp

def run(rank, world, store):
    os.environ["NCCL_HOSTID"] = f"pkb-rank-{rank}"
    os.environ["NCCL_SOCKET_IFNAME"] = "lo"
    os.environ["NCCL_IB_DISABLE"] = "1"
    torch.cuda.set_device(0)
    t0 = time.time()
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=rank, world_size=world,
                            device_id=torch.device("cuda", 0))
    x = torch.full((1 << 20,), float(rank + 1), device="cuda")
    dist.all_reduce(x)
    want = world * (world + 1) / 2
    parts = [torch.empty(4, device="cuda") for _ in range(world)]
    dist.all_gather(parts, torch.full((4,), float(rank), device="cuda"))
    torch.cuda.synchronize()
    ok = bool((x == want).all()) and all(bool((p == i).all()) for i, p in enumerate(parts))
    print(f"W={world} rank {rank}: all_reduce and all_gather {'OK' if ok else 'WRONG'} "
          f"({time.time() - t0:.2f} s with init)", flush=True)
    dist.destroy_process_group()

if __name__ == "__main__":
    world = int(sys.argv[1])
    store = tempfile.mktemp(prefix="nccl-hosts-store-")
    mp.spawn(run, args=(world, store), nprocs=world, join=True)
PY
for w in 2 4; do
  python3 "$script" "$w"
  echo "W=$w exit $?"
done
