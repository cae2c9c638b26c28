package fuseconn

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// kernelInit is an INIT request as a 6.x kernel sends it.
func kernelInit() []byte {
	in := fuse.InitIn{Major: 7, Minor: 44, MaxReadAhead: 128 << 10,
		Flags: uint32(fuse.CAP_ASYNC_READ | fuse.CAP_READDIRPLUS | fuse.CAP_PARALLEL_DIROPS | fuse.CAP_MAX_PAGES), Flags2: uint32(fuse.CAP_PASSTHROUGH >> 32)}
	in.Length = uint32(unsafe.Sizeof(in))
	in.Opcode = opInit
	in.Unique = 2
	return InitRequest(&in)
}

func TestReplayInit(t *testing.T) {
	opts := &fuse.MountOptions{MaxWrite: 1 << 20, MaxReadAhead: 1 << 20, MaxBackground: 64}
	a, err := ReplayInit(opts, kernelInit())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ReplayInit(opts, kernelInit())
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Fatalf("two replays of one INIT with one configuration differ: %x, %x", a, b)
	}
	var out fuse.InitOut
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&out)), unsafe.Sizeof(out)), a)
	if out.MaxWrite != 1<<20 || out.Flags2&uint32(fuse.CAP_PASSTHROUGH>>32) == 0 {
		t.Fatalf("replayed InitOut: MaxWrite %d, flags2 %#x: want 1 MiB and passthrough", out.MaxWrite, out.Flags2)
	}
	other, err := ReplayInit(&fuse.MountOptions{MaxWrite: 128 << 10, MaxBackground: 64}, kernelInit())
	if err != nil {
		t.Fatal(err)
	}
	if string(other) == string(a) {
		t.Fatal("another MaxWrite negotiates the same InitOut: a mismatch would go unnoticed")
	}
	notInit := kernelInit()
	notInit[4] = 3 // GETATTR
	if _, err := ReplayInit(opts, notInit); !errors.Is(err, ErrInit) {
		t.Fatalf("replay of a GETATTR: %v, want ErrInit", err)
	}
}
