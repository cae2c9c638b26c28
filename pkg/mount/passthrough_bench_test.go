package mount_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// BenchmarkSupervisedWarmRead: epochs of a supervised mount whose NR cache
// holds the whole dataset, with passthrough (the backing table: the
// default) and with --no-passthrough (what a supervised mount did before
// it), each by the first mount process (go-fuse's Server) and by one
// recovered after a kill -9 (pkg/handover's loop). An epoch opens, reads
// and closes every file, 2 readers in parallel. "kept": the kernel's page
// cache of the mount's files is kept from the last epoch; "dropped": each
// file's mount-side pages are dropped before it is read
// (posix_fadvise DONTNEED), so the reads reach the cache files — as for a
// dataset larger than the page cache — through the kernel (passthrough) or
// through the process. Record results in bench/RESULTS.md.
//
//	go test -run '^$' -bench BenchmarkSupervisedWarmRead -benchtime 5x ./pkg/mount/
func BenchmarkSupervisedWarmRead(b *testing.B) {
	testenv.RequireFUSE(b)
	bin := testenv.GoBuild(b, "./cmd/cachefs")
	src, files := testenv.WriteDataset(b, datagen.Spec{Files: 200, Classes: 4, MedianSize: 256 << 10, MaxSize: 1 << 20, Seed: 33})
	var total int64
	for _, f := range files {
		total += f.Size
	}
	for _, mode := range []string{"passthrough", "no-passthrough"} {
		b.Run(mode, func(b *testing.B) {
			opts := supervisedOpts(b, bin, src, 1<<30)
			if mode == "no-passthrough" {
				opts.Extra = []string{"--" + mountapi.FlagNoPassthrough}
			}
			sup := testenv.StartCachefs(b, bin, opts)
			waitCount(b, sup.Proc, `supervise: holding the connection`, 1)
			if err := readEpoch(opts.Mountpoint, files, false); err != nil { // fills the cache
				b.Fatal(err)
			}
			run := func(proc string) {
				for _, drop := range []bool{false, true} {
					name := proc + "/kept"
					if drop {
						name = proc + "/dropped"
					}
					b.Run(name, func(b *testing.B) {
						b.SetBytes(total)
						for b.Loop() {
							if err := readEpoch(opts.Mountpoint, files, drop); err != nil {
								b.Fatal(err)
							}
						}
					})
				}
			}
			run("first")
			if err := syscall.Kill(childPid(b, sup.Proc), syscall.SIGKILL); err != nil {
				b.Fatal(err)
			}
			waitCount(b, sup.Proc, `msg="supervise: recovered"`, 1)
			run("recovered")
		})
	}
}

// readEpoch reads every file once, whole, with 2 readers, checking sizes;
// drop first drops the file's pages on the mount side.
func readEpoch(mnt string, files []datagen.File, drop bool) error {
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1<<20)
			for i := w; i < len(files); i += 2 {
				if err := readOne(filepath.Join(mnt, files[i].Path), files[i].Size, drop, buf); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func readOne(p string, size int64, drop bool, buf []byte) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if drop {
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			return err
		}
	}
	var n int64
	for {
		k, err := f.Read(buf)
		n += int64(k)
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if n != size {
		return fmt.Errorf("%s: read %d bytes, want %d", p, n, size)
	}
	return nil
}
