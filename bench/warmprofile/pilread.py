# The reader of bench/warmprofile: what a torchvision ImageFolder worker does
# per sample (datasets.folder.pil_loader): open the file, PIL.Image.open,
# convert('RGB'), close -- in a seeded shuffled order, with W worker
# processes (fork, like DataLoader's) taking chunks of 64 (a batch).
#
#   python3 pilread.py ROOT LISTFILE WORKERS SEED [buffered]
#
# With "buffered", files are opened with an explicit buffer size
# (open(path, "rb", buffering=io.DEFAULT_BUFFER_SIZE)): CPython then skips
# the isatty() check that open() makes by default, an ioctl(TCGETS) that on
# a FUSE mount is one FUSE_IOCTL round trip per file. torchvision's
# pil_loader opens with the default, so that is what the plain run does.
#
# Prints one JSON line: files, seconds (the epoch, pool already started),
# and an order-free checksum of the decoded images (pixel count and the sum
# of each image's first pixel), so every source is seen to give the same
# images.
import io
import json
import os
import random
import sys
import time
from multiprocessing import Pool

from PIL import Image


BUFFERING = -1


def load(path):
    with open(path, "rb", buffering=BUFFERING) as f:
        img = Image.open(f)
        img = img.convert("RGB")
    r, g, b = img.getpixel((0, 0))
    return img.size[0] * img.size[1], r + g + b


def noop(_):
    return os.getpid()


def main():
    global BUFFERING
    root, listfile, workers, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    if sys.argv[5:] == ["buffered"]:
        BUFFERING = io.DEFAULT_BUFFER_SIZE  # set before the pool forks
    with open(listfile) as f:
        paths = [os.path.join(root, line.strip()) for line in f if line.strip()]
    random.Random(seed).shuffle(paths)
    with Pool(workers) as pool:
        pool.map(noop, range(workers * 4))  # workers up before the clock starts
        start = time.monotonic()
        pixels = first = n = 0
        for px, fp in pool.imap_unordered(load, paths, chunksize=64):
            pixels += px
            first += fp
            n += 1
        secs = time.monotonic() - start
    print(json.dumps({"files": n, "seconds": secs, "pixels": pixels, "first": first}))


if __name__ == "__main__":
    main()
