package testenv

import (
	"fmt"
	"net"
	"testing"
)

// FreePorts returns n distinct TCP ports on 127.0.0.1 that were free a
// moment ago (all n are held until all are found, so none repeats).
// Another process may take one before the caller binds it: servers started
// on them should be retried on a bind failure.
func FreePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("testenv: free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// FreePort is FreePorts(1) for a test, which fails when none is found.
func FreePort(t testing.TB) int {
	t.Helper()
	ports, err := FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return ports[0]
}
