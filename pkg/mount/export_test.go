package mount

import (
	"time"

	"github.com/epochfs/epochfs/pkg/backend"
)

// WrapBackend makes the mount of c read through wrap(its backend).
func WrapBackend(c *Config, wrap func(backend.Backend) backend.Backend) { c.wrapBackend = wrap }

// WithoutNodeTable makes the mount of c record no node ids (no recovery
// without a manifest): the node table's cost.
func WithoutNodeTable(c *Config) { c.noNodeTable = true }

// SetUnmountTimers shortens Unmount's waits for a test (restored at cleanup).
func SetUnmountTimers(t interface{ Cleanup(func()) }, grace, stacks time.Duration) {
	g, s := unmountGrace, unmountStacks
	unmountGrace, unmountStacks = grace, stacks
	t.Cleanup(func() { unmountGrace, unmountStacks = g, s })
}
