# NFS test servers (included by the main Makefile): NFS-Ganesha and rpcbind from Debian, run by the tests
# (internal/testenv/nfs.StartGanesha) in private network namespaces through scripts/nfs-server.sh.

.PHONY: nfs-deps nfs-sweep

## nfs-deps: the Debian packages of the NFS tests (nfs-ganesha, nfs-ganesha-vfs, rpcbind), apt-get only when missing.
nfs-deps:
	bash scripts/nfs-deps.sh

## nfs-sweep: stop NFS-Ganesha test servers (and their network namespaces) whose test process is gone.
nfs-sweep:
	bash scripts/nfs-server.sh sweep

.PHONY: bench-nfs
## bench-nfs: cold epoch through a mount of nfs:// vs the nfs backend read directly, same readers, NFS-Ganesha in its
## namespace (root; BENCH_ARGS e.g. '-rounds 5 -files 4000'); the table goes in bench/RESULTS.md by hand.
bench-nfs: build nfs-deps
	$(GO) build -o bin/bench-nfs ./bench/nfs
	bin/bench-nfs -cachefs bin/cachefs $(BENCH_ARGS)
