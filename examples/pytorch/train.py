#!/usr/bin/env python3
"""Train a tiny CNN on an ImageFolder tree (one directory per class) with a
DataLoader of worker processes, on CPU; DDP over gloo when run by torchrun
with WORLD_SIZE > 1.

    python3 examples/pytorch/train.py --data DIR [--epochs 2] [--batch-size 64]
        [--workers 2] [--image-size 64] [--lr 0.05] [--seed 0] [--threads N]
    torchrun --nproc-per-node 2 examples/pytorch/train.py --data DIR

Output (stdout, flushed line by line): one JSON object per line for programs,
and human lines that do not start with "{":
    {"event":"start","rank":R,"world":W,"dataset":N,"classes":K,"workers":w,"batch_size":b}
    {"event":"epoch","epoch":E,"rank":R,"world":W,"samples":n,"images_per_s":x,
     "loss":l,"seconds":s,"checksum":"<16 hex>","indices":[sorted dataset indices]}
    {"event":"done","rank":R,"epochs":E}
images_per_s is measured over the whole epoch, the first batch (and the
workers' start) included; loss is the mean of this rank's batch losses;
checksum is the order-free checksum of the decoded tensors this rank read
(epochdata.py): the sum over ranks mod 2^64 is the dataset's.

Exit status: 0 done, 2 bad arguments or a missing/empty data directory.
"""

import argparse
import fcntl
import json
import os
import sys
import tempfile
import time

try:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.utils.data import DataLoader, DistributedSampler, RandomSampler

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import epochdata  # the sibling module, wherever the directory is copied
except ImportError as e:
    sys.exit("train.py: %s: %s needs torch and torchvision (Debian 12: apt-get install python3-torch "
             "python3-torchvision python3-pil, then run /usr/bin/python3)" % (e, sys.executable))


def parse_args(argv):
    p = argparse.ArgumentParser(description="Train a tiny CNN on an ImageFolder tree (DDP over gloo under torchrun).")
    p.add_argument("--data", required=True, help="dataset root: one directory per class, holding JPEGs")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=2, help="DataLoader worker processes (0: load in the main process)")
    p.add_argument("--image-size", type=int, default=64, help="images are resized to SIZE×SIZE")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads of the training process")
    a = p.parse_args(argv)
    for name in ("epochs", "batch_size", "image_size", "threads"):
        if getattr(a, name) < 1:
            p.error("--%s %d: want at least 1" % (name.replace("_", "-"), getattr(a, name)))
    if a.workers < 0:
        p.error("--workers %d: want 0 or more" % a.workers)
    return a


def _stdout_lock():
    """An exclusive lock shared by every process writing to this stdout
    (torchrun's ranks of one pod share its pipe), or None. torchrun runs
    python -u and pods set PYTHONUNBUFFERED, so print() writes a line and
    its newline apart, and a pipe write over 4 KiB (an epoch line's
    indices) is not atomic: without the lock the ranks' lines interleave."""
    try:
        st = os.fstat(1)
        path = os.path.join(tempfile.gettempdir(), "epochfs-train-stdout-%d-%d.lock" % (st.st_dev, st.st_ino))
        return os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    except OSError:
        return None


_LOCK = _stdout_lock()


def write_line(line):
    """Writes line and a newline to stdout at once, under the stdout lock."""
    data = (line + "\n").encode()
    sys.stdout.flush()
    if _LOCK is not None:
        fcntl.flock(_LOCK, fcntl.LOCK_EX)
    try:
        while data:
            data = data[os.write(1, data):]
    finally:
        if _LOCK is not None:
            fcntl.flock(_LOCK, fcntl.LOCK_UN)


def emit(obj):
    write_line(json.dumps(obj, separators=(",", ":")))


def say(line):
    write_line(line)


class Run:
    """One rank's training: the data, the loader, the model."""

    def __init__(self, args, dataset, rank, world):
        self.args, self.dataset, self.rank, self.world = args, dataset, rank, world
        if world > 1:
            self.sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
        else:
            gen = torch.Generator()
            gen.manual_seed(args.seed)
            self.sampler = RandomSampler(dataset, generator=gen)
        self.loader = DataLoader(dataset, batch_size=args.batch_size, sampler=self.sampler,
                                 num_workers=args.workers, drop_last=False)
        torch.manual_seed(args.seed)
        model = epochdata.TinyCNN(len(dataset.classes))
        self.model = nn.parallel.DistributedDataParallel(model) if world > 1 else model
        self.opt = torch.optim.SGD(self.model.parameters(), lr=args.lr, momentum=0.9)
        self.loss_fn = nn.CrossEntropyLoss()

    def epoch(self, e):
        """Trains epoch e (1-based) and reports it."""
        if isinstance(self.sampler, DistributedSampler):
            self.sampler.set_epoch(e - 1)
        self.model.train()
        indices, sums, losses = [], [], []
        start = time.perf_counter()
        for images, labels, idx, sums_batch in self.loader:
            self.opt.zero_grad()
            loss = self.loss_fn(self.model(images), labels)
            loss.backward()
            self.opt.step()
            losses.append(loss.item())
            indices.extend(idx.tolist())
            sums.append(sums_batch)
        seconds = time.perf_counter() - start
        n = len(indices)
        rate = n / seconds if seconds > 0 else 0.0
        mean_loss = sum(losses) / len(losses) if losses else float("nan")
        emit({"event": "epoch", "epoch": e, "rank": self.rank, "world": self.world, "samples": n,
              "images_per_s": round(rate, 2), "loss": round(mean_loss, 6), "seconds": round(seconds, 4),
              "checksum": epochdata.format_checksum(epochdata.sum_checksums(sums)), "indices": sorted(indices)})
        say("epoch %d rank %d/%d: %d samples, %.1f images/s, loss %.4f"
            % (e, self.rank, self.world, n, rate, mean_loss))


def main(argv):
    args = parse_args(argv)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0")) if world > 1 else 0
    torch.set_num_threads(args.threads)
    try:
        dataset = epochdata.ChecksumImageFolder(args.data, epochdata.image_transform(args.image_size))
    except epochdata.DatasetError as e:
        print("train.py: --data %s" % e, file=sys.stderr, flush=True)
        return 2
    if world > 1:
        dist.init_process_group("gloo")
    run = Run(args, dataset, rank, world)
    emit({"event": "start", "rank": rank, "world": world, "dataset": len(dataset), "classes": len(dataset.classes),
          "workers": args.workers, "batch_size": args.batch_size})
    for e in range(1, args.epochs + 1):
        run.epoch(e)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    emit({"event": "done", "rank": rank, "epochs": args.epochs})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
