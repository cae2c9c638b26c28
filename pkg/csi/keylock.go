package csi

import (
	"context"
	"sync"

	"google.golang.org/grpc/status"
)

// keyedLocks is a set of mutexes by key (a volume id, a dataset key) whose
// Lock gives up when its context ends. Written here rather than taken from
// k8s.io/utils/keymutex because that one can neither be abandoned on a
// context (a gRPC call whose caller gave up must not wait on a mount that
// hangs) nor tried; and its hashed variant would make unrelated keys wait on
// each other, which is what per-dataset locking exists to avoid. A lock is
// dropped from the map when nobody holds or waits for it, so the map stays
// as small as the work in flight.
type keyedLocks struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	ch   chan struct{} // holds a token while the lock is held
	refs int           // holders and waiters; guarded by keyedLocks.mu
}

// ref returns key's lock with one more reference, creating it.
func (k *keyedLocks) ref(key string) *keyLock {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.locks == nil {
		k.locks = map[string]*keyLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyLock{ch: make(chan struct{}, 1)}
		k.locks[key] = l
	}
	l.refs++
	return l
}

// unref drops a reference to key's lock, and the lock with the last one.
func (k *keyedLocks) unref(key string, l *keyLock) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if l.refs--; l.refs == 0 {
		delete(k.locks, key)
	}
}

// lock takes key's lock, waiting until it is free or ctx ends; then it
// returns ctx's error as a gRPC status (DeadlineExceeded, Canceled) naming
// what was waited for. The returned func releases the lock.
func (k *keyedLocks) lock(ctx context.Context, key, what string) (func(), error) {
	l := k.ref(key)
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; k.unref(key, l) }, nil
	case <-ctx.Done():
		k.unref(key, l)
		return nil, status.Errorf(status.FromContextError(ctx.Err()).Code(),
			"%s %s is busy (another operation on it, e.g. a mount that is starting, is still running): %v", what, key, ctx.Err())
	}
}

// tryLock takes key's lock only if it is free.
func (k *keyedLocks) tryLock(key string) (func(), bool) {
	l := k.ref(key)
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; k.unref(key, l) }, true
	default:
		k.unref(key, l)
		return nil, false
	}
}
