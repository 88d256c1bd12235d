"""Loads every dump under a folder with stock torch.load, as a user of `pkb-eval --dump-inputs`
would, and checks each tensor against its manifest entry (dtype, shape, the exact bits of
tensors stored as another dtype).

    python3 dump_load_test.py DUMPS   # DUMPS/<problem>/manifest.json, one folder per problem
"""
import json
import os
import sys

if os.environ.get("PKB_TORCH_LAZY"):
    # dump_load_test.sh stood in for CUDA libraries the CPU machine lacks: bind lazily, so that
    # only what CPU tensors use is resolved.
    sys.setdlopenflags(os.RTLD_LAZY | os.RTLD_GLOBAL)
import torch  # noqa: E402


def load(folder, entry):
    t = torch.load(os.path.join(folder, entry["file"]))
    if entry["stored_as"] != entry["dtype"]:
        t = t.view(getattr(torch, entry["dtype"]))
    return t


def main(root):
    problems, tensors, converted, dtypes, failures = 0, 0, 0, set(), []
    for name in sorted(os.listdir(root)):
        folder = os.path.join(root, name)
        manifest_path = os.path.join(folder, "manifest.json")
        if not os.path.exists(manifest_path):
            continue
        with open(manifest_path) as f:
            manifest = json.load(f)
        problems += 1
        for entry in manifest["files"]:
            where = f"{manifest['slug']}/{entry['file']}"
            try:
                stored = torch.load(os.path.join(folder, entry["file"]))
                t = load(folder, entry)
            except Exception as e:  # noqa: BLE001 - every failure is reported
                failures.append(f"{where}: torch.load failed: {e}")
                continue
            tensors += 1
            dtypes.add(entry["dtype"])
            if str(t.dtype) != f"torch.{entry['dtype']}":
                failures.append(f"{where}: dtype {t.dtype}, manifest {entry['dtype']}")
            if list(t.shape) != entry["shape"]:
                failures.append(f"{where}: shape {list(t.shape)}, manifest {entry['shape']}")
            if entry["stored_as"] != entry["dtype"]:
                converted += 1
                # The bits round-trip: viewing back gives the stored integers unchanged.
                if not torch.equal(t.view(stored.dtype), stored):
                    failures.append(f"{where}: bits changed by the view")
    print(f"{problems} problems, {tensors} tensors loaded ({converted} stored as their bits), "
          f"dtypes: {', '.join(sorted(dtypes))}")
    for f in failures:
        print("FAIL", f)
    if problems == 0:
        print("FAIL no dumps found")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
