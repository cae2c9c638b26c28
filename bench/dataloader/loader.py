#!/usr/bin/env python3
"""One epoch of a PyTorch DataLoader, as a user's training script runs it.

bench/dataloader (make bench-dataloader) runs this script once per cell of its
table; it can also be run by hand:

    python3 loader.py --data DIR --workers 2            # ImageFolder over a directory
    python3 loader.py --s3-bucket B [--s3-prefix P] --endpoint-url http://127.0.0.1:9000 --workers 2

A directory (local disk, an EpochFS mount, an rclone mount) is read with
torchvision's ImageFolder; an S3 prefix with boto3 in the workers, each worker
opening its own client on its first sample, as users do without a mount (the
keys are listed once, in the main process). Both decode with PIL and apply
Resize((64, 64)) + ToTensor; batch 64, shuffled with --seed, torch threads 1.

Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY only (never
flags); the endpoint from --endpoint-url or AWS_ENDPOINT_URL.

It prints one JSON line: images, seconds (dataset construction, listing
included, to the last batch), images_per_s, and checksum: per sample the
first 8 bytes of sha256 of the uint8-quantized tensor, computed in the
worker, summed mod 2**64 (order-free: any order and any number of workers
give the same value for the same decoded images), as 16 hex digits.
"""

import argparse
import hashlib
import io
import json
import os
import sys
import time

import torch
import torch.utils.data
import torchvision.datasets
import torchvision.transforms as T
from PIL import Image

MASK = (1 << 64) - 1


def transform():
    return T.Compose([T.Resize((64, 64)), T.ToTensor()])


def sample_hash(t):
    """First 8 bytes of sha256 of the uint8-quantized tensor, as a signed int64
    (so that the default collate can carry it)."""
    q = (t * 255).round().clamp(0, 255).to(torch.uint8).contiguous()
    d = hashlib.sha256(q.numpy().tobytes()).digest()[:8]
    return int.from_bytes(d, "little", signed=True)


class Hashed(torch.utils.data.Dataset):
    """A dataset of (tensor, label) with each sample's hash added."""

    def __init__(self, base):
        self.base = base

    def __len__(self):
        return len(self.base)

    def __getitem__(self, i):
        t, label = self.base[i]
        return t, label, sample_hash(t)


class S3Images(torch.utils.data.Dataset):
    """JPEGs under an S3 prefix, class = first path component under it; the
    keys listed once here, each worker opening its own boto3 client lazily."""

    def __init__(self, bucket, prefix, endpoint, region, tf):
        self.bucket, self.endpoint, self.region, self.tf = bucket, endpoint, region, tf
        self.client = None  # per process: created on the first sample
        prefix = prefix.strip("/")
        self.prefix = prefix + "/" if prefix else ""
        keys = []
        pages = self._new_client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=self.prefix)
        for page in pages:
            for obj in page.get("Contents", []):
                rel = obj["Key"][len(self.prefix):]
                if "/" in rel and rel.lower().endswith((".jpg", ".jpeg", ".png")):
                    keys.append(rel)
        keys.sort()
        classes = sorted({k.split("/", 1)[0] for k in keys})
        index = {c: i for i, c in enumerate(classes)}
        self.samples = [(k, index[k.split("/", 1)[0]]) for k in keys]

    def _new_client(self):
        import boto3
        import botocore.config

        cfg = botocore.config.Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3})
        return boto3.session.Session().client("s3", endpoint_url=self.endpoint, region_name=self.region, config=cfg)

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        if self.client is None:
            self.client = self._new_client()
        key, label = self.samples[i]
        body = self.client.get_object(Bucket=self.bucket, Key=self.prefix + key)["Body"].read()
        img = Image.open(io.BytesIO(body)).convert("RGB")
        return self.tf(img), label


def worker_init(_):
    torch.set_num_threads(1)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", help="directory of class folders (ImageFolder)")
    p.add_argument("--s3-bucket", help="read this bucket with boto3 in the workers instead")
    p.add_argument("--s3-prefix", default="", help="key prefix of the dataset in --s3-bucket")
    p.add_argument("--endpoint-url", default=os.environ.get("AWS_ENDPOINT_URL"), help="S3 endpoint (default: $AWS_ENDPOINT_URL)")
    p.add_argument("--region", default=os.environ.get("AWS_REGION", "us-east-1"))
    p.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--seed", type=int, default=1, help="seed of the shuffle")
    a = p.parse_args(argv)
    if (a.data is None) == (a.s3_bucket is None):
        p.error("give exactly one of --data and --s3-bucket")
    return a


def run(a):
    torch.set_num_threads(1)
    start = time.monotonic()
    if a.data is not None:
        base = torchvision.datasets.ImageFolder(a.data, transform=transform())
    else:
        base = S3Images(a.s3_bucket, a.s3_prefix, a.endpoint_url, a.region, transform())
    loader = torch.utils.data.DataLoader(
        Hashed(base),
        batch_size=a.batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(a.seed),
        num_workers=a.workers,
        worker_init_fn=worker_init,
    )
    images, checksum = 0, 0
    for _, labels, hashes in loader:
        images += len(labels)
        for h in hashes.tolist():
            checksum = (checksum + h) & MASK
    seconds = time.monotonic() - start
    return {
        "images": images,
        "seconds": round(seconds, 4),
        "images_per_s": round(images / seconds, 2) if seconds > 0 else 0,
        "checksum": "%016x" % checksum,
        "workers": a.workers,
        "torch": torch.__version__,
    }


def main(argv):
    print(json.dumps(run(parse_args(argv)), sort_keys=True), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
