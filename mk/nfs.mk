# NFS test servers (included by the main Makefile): NFS-Ganesha and rpcbind from Debian, run by the tests
# (internal/testenv.StartGanesha) in private network namespaces through scripts/nfs-server.sh.

.PHONY: nfs-deps nfs-sweep

## nfs-deps: the Debian packages of the NFS tests (nfs-ganesha, nfs-ganesha-vfs, rpcbind), apt-get only when missing.
nfs-deps:
	bash scripts/nfs-deps.sh

## nfs-sweep: stop NFS-Ganesha test servers (and their network namespaces) whose test process is gone.
nfs-sweep:
	bash scripts/nfs-server.sh sweep
