"""The torchrun line of docs/python.md, run as written: a train.py beside it takes one
DistributedDataParallel step over hoop, and every rank's gradients must equal the mean of the
per-rank gradients computed here on one process.

usage: test_torchrun_doc.py DOCS/python.md     (exit 77 where torch or torchrun is missing)
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

TRAIN = r'''
import json
import torch
import torch.distributed as dist
import hoop.torch

dist.init_process_group("hoop")
rank, size = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.Linear(3, 1)
ddp = torch.nn.parallel.DistributedDataParallel(model)
x = torch.arange(6, dtype=torch.float32).view(2, 3) * (rank + 1)
loss = ((ddp(x) - rank) ** 2).mean()
loss.backward()
with open("out-%d.json" % rank, "w") as f:
    json.dump({"size": size, "backend": dist.get_backend(),
               "grads": [p.grad.reshape(-1).tolist() for p in model.parameters()]}, f)
dist.destroy_process_group()
'''


def reference(size):
    import torch

    per_rank = []
    for rank in range(size):
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 1)
        x = torch.arange(6, dtype=torch.float32).view(2, 3) * (rank + 1)
        ((model(x) - rank) ** 2).mean().backward()
        per_rank.append([p.grad.reshape(-1).clone() for p in model.parameters()])
    return [(sum(g[i] for g in per_rank) / size).tolist() for i in range(len(per_rank[0]))]


def main():
    try:
        import torch  # noqa: F401
    except ImportError as e:
        print("SKIP: %s cannot import torch (%s)" % (sys.executable, e))
        return 77
    with open(sys.argv[1]) as f:
        lines = [ln.strip() for ln in f if ln.strip().startswith("torchrun ")]
    if len(lines) != 1:
        print("FAIL: expected one torchrun line in %s, found %d" % (sys.argv[1], len(lines)))
        return 1
    cmd = shlex.split(lines[0])
    if shutil.which(cmd[0]) is None:
        print("SKIP: %s is not installed (it comes with python3-torch)" % cmd[0])
        return 77
    m = re.search(r"--nproc[_-]per[_-]node[ =](\d+)", lines[0])
    size = int(m.group(1)) if m else 1
    print("running:", lines[0])
    sys.stdout.flush()
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "train.py"), "w") as f:
            f.write(TRAIN)
        env = dict(os.environ, TMPDIR=tmp)
        try:
            rc = subprocess.call(cmd, cwd=tmp, env=env, timeout=150)
        except subprocess.TimeoutExpired:
            print("FAIL: %s did not finish in 150 s" % lines[0])
            return 1
        if rc != 0:
            print("FAIL: %s exited with status %d" % (lines[0], rc))
            return 1
        want = reference(size)
        for rank in range(size):
            path = os.path.join(tmp, "out-%d.json" % rank)
            if not os.path.exists(path):
                print("FAIL: rank %d of %d wrote no result" % (rank, size))
                return 1
            with open(path) as f:
                got = json.load(f)
            if got["size"] != size or got["backend"] != "hoop":
                print("FAIL: rank %d ran as %s of %d ranks" % (rank, got["backend"], got["size"]))
                return 1
            for g, w in zip(got["grads"], want):
                if len(g) != len(w) or any(abs(a - b) > 1e-5 * max(1.0, abs(b))
                                           for a, b in zip(g, w)):
                    print("FAIL: rank %d gradients %s, reference %s" % (rank, got["grads"], want))
                    return 1
    print("ok: %d ranks under torchrun, gradients equal to the reference's" % size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
