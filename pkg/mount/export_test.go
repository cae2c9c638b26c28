package mount

import "github.com/epochfs/epochfs/pkg/backend"

// WrapBackend makes the mount of c read through wrap(its backend).
func WrapBackend(c *Config, wrap func(backend.Backend) backend.Backend) { c.wrapBackend = wrap }
