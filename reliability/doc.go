// Package reliability holds EpochFS's fault, crash, disk-full and leak tests:
// nothing wrong is ever served, nothing hangs past its deadline, nothing
// leaks (RELIABILITY.md has the figures). They run real parts: MinIO behind
// a fault-injecting proxy, real FUSE mounts, real `cachefs mount` processes
// killed with SIGKILL, a real tmpfs that fills up. `make test` runs them at a
// small scale;
// `make reliability` runs them at full scale (RELIABILITY_READS=100000,
// RELIABILITY_ROUNDS=20) and prints the figures recorded in RELIABILITY.md.
package reliability
