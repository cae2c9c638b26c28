# Benchmarks of the hit-ratio, throughput and metadata goals (included by the main Makefile). They need root
# (FUSE mounts, dropping the page cache); results go in bench/RESULTS.md by
# hand, with the machine and the command (the scripts print them).
#
#   make bench-hitratio      NR vs LRU/FIFO/Random/TinyLFU byte hit ratios through real mounts
#   make bench-throughput    P2 (cached epoch vs native and rclone) and P3 (cold epoch from MinIO vs a GET loop)
#   make bench-throughput-far  P3 again with BENCH_S3_LATENCY (20ms) added to every request: a far object store
#   make bench-meta          metadata at 1M files: mount with a manifest vs without vs rclone mount (local and MinIO)
#   make bench-cluster       the cluster-wide cache: 3 mounts, cluster scope vs node scope, C = D/3 and D/6
#   make bench-cluster-1m    the same at 1M tiny files over a local directory, NR, C = D/4 and D/2 per node (~35 min)
#   make bench-dataloader    PyTorch's DataLoader (torch 1.13) over local disk, EpochFS, boto3 and rclone, near and far
#   make bench-manifest-scale  a 10M-entry ImageNet-like manifest: build, size, load, heap per entry, mount ready
#   make bench-warm-profile  a warm PIL epoch: local disk vs the mount vs go-fuse's loopback, mount CPU and FUSE requests per file
#
# BENCH_ARGS passes flags (e.g. BENCH_ARGS=-tiny, BENCH_ARGS='-rounds 5').

BENCH_ARGS       ?=
BENCH_S3_LATENCY ?= 20ms

.PHONY: bench-hitratio bench-throughput bench-throughput-far bench-meta bench-cluster bench-cluster-1m bench-manifest-scale bench-dataloader bench-tools
.PHONY: bench-warm-profile

## bench-hitratio: table (bench/hitratio.md) and plot (bench/hitratio.png) of byte hit ratio per epoch per policy.
bench-hitratio:
	$(GO) build -o bin/bench-hitratio ./bench/hitratio
	bin/bench-hitratio -md bench/hitratio.md -png bench/hitratio.png $(BENCH_ARGS)

## bench-throughput: P2 and P3, interleaved rounds, report in bench/throughput.md.
bench-throughput: build bench-tools
	$(GO) build -o bin/bench-throughput ./bench/throughput
	bin/bench-throughput -tools $(TOOLS_BIN) -cachefs bin/cachefs -md bench/throughput.md $(BENCH_ARGS)

## bench-throughput-far: P3 only, every reader reaching MinIO through a proxy that adds BENCH_S3_LATENCY to each
## request (bench/throughput-far.md): where a cold epoch is bound by request latency, as with a real object store.
bench-throughput-far: build bench-tools
	$(GO) build -o bin/bench-throughput ./bench/throughput
	bin/bench-throughput -tools $(TOOLS_BIN) -cachefs bin/cachefs -only p3 -s3-latency $(BENCH_S3_LATENCY) \
		-md bench/throughput-far.md $(BENCH_ARGS)

## bench-meta: metadata at 1M files (mount→ready, walk lstat/s, RSS per file): manifest vs lazy listings on local
## disk, then the same in MinIO plus rclone mount. The dataset and MinIO data stay in /var/tmp/epochfs-meta
## (~10 GB; the first upload of 1M objects takes ~45 min here). BENCH_ARGS='-s3=false' for local only.
bench-meta: bench-tools
	$(GO) run ./bench/meta -dir /var/tmp/epochfs-meta -files 1000000 -walkers 8 -rounds 2 -s3 \
		-minio $(TOOLS_BIN)/minio -rclone $(TOOLS_BIN)/rclone $(BENCH_ARGS)

## bench-cluster: the cluster-wide cache (issue 15): 3 mounts, C = D/3 and D/6, MinIO behind BENCH_S3_LATENCY,
## cluster scope vs node scope per epoch (bench/cluster.md, plot bench/cluster.svg); BENCH_ARGS=-compare-cachefs OLD-BINARY adds
## the older binary's peer reads side by side.
bench-cluster: build
	$(GO) build -o bin/bench-cluster ./bench/cluster
	bin/bench-cluster -tools $(TOOLS_BIN) -cachefs bin/cachefs -s3-latency $(BENCH_S3_LATENCY) -md bench/cluster.md -svg bench/cluster.svg $(BENCH_ARGS)

## bench-cluster-1m: the cluster-wide cache at 1M files of 1–4 KB (issue 15 item 6): 3 mounts over a local directory
## (posix source, in a temporary directory), NR, C = D/4 and D/2 per node, node vs cluster scope (bench/cluster-1m.md).
bench-cluster-1m: build
	$(GO) build -o bin/bench-cluster ./bench/cluster
	bin/bench-cluster -cachefs bin/cachefs -posix -files 1000000 -classes 1000 -min-size 1024 -max-size 4096 -median-size 2048 \
		-fractions 4,2 -variants node,cluster -epochs 2 -peer-reads=false -md bench/cluster-1m.md $(BENCH_ARGS)

## bench-manifest-scale: a manifest of 10M synthetic ImageNet-like files (no files on disk: a fake in-memory listing
## through manifest.Index, what `cachefs index` runs), with S3 ETag and posix versions: build time, size, load time,
## heap per entry, and (as root) a real mount ready to stat a file. Goals: ready ≤ 3 s, ≤ 40 B/entry. ~4 GB of RAM.
bench-manifest-scale:
	$(GO) build -o bin/bench-manifest-scale ./bench/manifestscale
	bin/bench-manifest-scale -files 10000000 $(BENCH_ARGS)

## bench-warm-profile: where a warm epoch's time goes (issue 24): a PIL reader (open, Image.open, convert('RGB'), as
## an ImageFolder worker; Debian's python3-pil) over 2,000 JPEGs on local disk, through a warm cachefs mount and
## through go-fuse's loopback, interleaved rounds: images/s, mount and reader CPU per image, FUSE requests by opcode,
## a CPU profile of the mount (bench/RESULTS.md, "Warm epoch: where the time goes"). Root; ~10 min.
bench-warm-profile: bin/cachefs
	$(GO) build -o bin/bench-warm-profile ./bench/warmprofile
	bin/bench-warm-profile -cachefs bin/cachefs -rounds 4 -buffered -variants procs1 -pprof bin/warm-profile.pprof $(BENCH_ARGS)

## bench-dataloader: one epoch of a PyTorch DataLoader (Debian's python3-torch 1.13: ImageFolder/boto3, Resize 64 + ToTensor,
## batch 64, 2 and 8 workers) over 2,000 JPEGs from local disk, an EpochFS mount cold/warm, boto3 and rclone mount
## cold/warm, near and behind BENCH_S3_LATENCY, and after `cachefs prefetch`; interleaved rounds, waits for a quiet
## machine (load < 1.5, ≤ 20 min); report bench/dataloader.md, plot bench/dataloader.png. BENCH_ARGS=-quick: a smoke run.
bench-dataloader: build bench-tools
	$(GO) build -o bin/bench-dataloader ./bench/dataloader
	bin/bench-dataloader -tools $(TOOLS_BIN) -cachefs bin/cachefs -s3-latency $(BENCH_S3_LATENCY) -wait-load 1.5 \
		-md bench/dataloader.md -png bench/dataloader.png $(BENCH_ARGS)

## bench-tools: rclone (pinned, from the Go module proxy), MinIO, and fuse3 for rclone mount.
bench-tools: $(TOOLS_BIN)/rclone $(TOOLS_BIN)/minio
	bash bench/setup.sh

