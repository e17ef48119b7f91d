#!/usr/bin/python3
"""The reference for ddp_train: the same job written again in PyTorch, from the description in
docs/ddp.md (the random streams, the data set, nn.Linear's initialisation, DistributedSampler's
shuffle and padding), trained in one process with the global batch, which is what DDP's gradient
averaging is equivalent to. Autograd computes the gradients, torch.optim.SGD applies them.

usage: torch_ref.py JOB [:: JOB ...]
JOB: --out WEIGHTS --losses FILE [--model linear|mlp] [--hidden 32,16] [--samples N] [--features N]
     [--seed N] [--lr X] [--batch B_PER_RANK] [--world N] [--epochs N]
Each job writes its final parameters as raw float32 in ddp_train's layout, and one loss per epoch.
Several jobs share one start of Python and PyTorch, the slow part.
"""
import argparse
import sys

try:
    import numpy as np
    import torch
except ImportError as e:
    print("torch_ref: %s; skipping" % e, file=sys.stderr)
    sys.exit(77)

M64 = (1 << 64) - 1
STREAM_DATA, STREAM_INIT, STREAM_SHUFFLE = 1, 2, 3


class Rng:
    """splitmix64, seeded as seed XOR (stream * 0xD6E8FEB86659FD93)."""

    def __init__(self, seed, stream):
        self.s = (seed ^ (stream * 0xD6E8FEB86659FD93)) & M64

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & M64
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)

    def uniform(self, n):
        """n values uniform on [-1, 1): 24 random bits each, exact in float32."""
        v = np.array([(self.next() >> 40) - (1 << 23) for _ in range(n)], dtype=np.float64)
        return (v * 2.0 ** -23).astype(np.float32)


def make_data(samples, features, seed):
    r = Rng(seed, STREAM_DATA)
    w = r.uniform(features)
    b = r.uniform(1)[0]
    x = np.empty((samples, features), dtype=np.float32)
    noise = np.empty(samples, dtype=np.float32)
    for i in range(samples):
        row = r.uniform(features + 1)
        x[i] = row[:features]
        noise[i] = row[features]
    # Accumulated in float32 in the same order as the description: b, then feature by feature.
    acc = np.full(samples, b, dtype=np.float32)
    for k in range(features):
        acc = acc + w[k] * x[:, k]
    y = acc + np.float32(0.1) * noise
    return x, y


def epoch_order(samples, world, seed, epoch):
    """DistributedSampler(shuffle=True, drop_last=False): the permutation of epoch, padded with its
    own beginning to a multiple of world. Rank r takes positions r, r + world, ...; the union of the
    ranks' step-s batches is positions [s * b * world, (s + 1) * b * world) of this list."""
    order = list(range(samples))
    r = Rng(seed + epoch, STREAM_SHUFFLE)
    for i in range(samples, 1, -1):
        j = r.next() % i
        order[i - 1], order[j] = order[j], order[i - 1]
    total = -(-samples // world) * world
    return [order[p % samples] for p in range(total)]


def run(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--losses", required=True)
    ap.add_argument("--model", default="linear")
    ap.add_argument("--hidden", default="1024,1024,1024")
    ap.add_argument("--samples", type=int, default=2048)
    ap.add_argument("--features", type=int, default=20)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=10)
    a = ap.parse_args(argv)

    dims = [a.features] + ([int(h) for h in a.hidden.split(",")] if a.model == "mlp" else []) + [1]
    layers = []
    r = Rng(a.seed, STREAM_INIT)
    for din, dout in zip(dims[:-1], dims[1:]):
        lin = torch.nn.Linear(din, dout)
        bound = np.float32(1) / np.sqrt(np.float32(din))
        w = r.uniform(dout * din) * bound
        b = r.uniform(dout) * bound
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w.reshape(dout, din)))
            lin.bias.copy_(torch.from_numpy(b))
        layers += [lin, torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1])

    x, y = make_data(a.samples, a.features, a.seed)
    x, y = torch.from_numpy(x), torch.from_numpy(y).reshape(-1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    loss_fn = torch.nn.MSELoss()
    per_rank = -(-a.samples // a.world)
    steps = -(-per_rank // a.batch)
    gb = a.batch * a.world
    with open(a.losses, "w") as lf:
        for epoch in range(a.epochs):
            order = torch.tensor(epoch_order(a.samples, a.world, a.seed, epoch))
            total = 0.0
            for s in range(steps):
                idx = order[s * gb:(s + 1) * gb]
                opt.zero_grad()
                loss = loss_fn(model(x[idx]), y[idx])
                loss.backward()
                opt.step()
                total += loss.item()
            lf.write("%d %.9g\n" % (epoch, total / steps))
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()
    flat.astype(np.float32).tofile(a.out)


def main():
    torch.set_num_threads(1)
    job = []
    for arg in sys.argv[1:] + ["::"]:
        if arg == "::":
            run(job)
            job = []
        else:
            job.append(arg)


if __name__ == "__main__":
    main()
