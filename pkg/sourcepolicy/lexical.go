package sourcepolicy

import (
	"fmt"

	"github.com/epochfs/epochfs/pkg/backend"
)

// CheckLexically is Check for a caller that does not see the node's file
// system (the job controller): a local source is judged by its cleaned path
// alone, without resolving symlinks or requiring it to exist, against the
// same rules ("/", /proc, /sys, /dev and Forbidden by name; under an allowed
// root). Network sources and mirrors are checked as by Check. It can only
// refuse early what the node would refuse: the node's Check, which resolves
// symlinks, remains the check that counts.
func (c *Checker) CheckLexically(src backend.Source, hasCredentials bool) error {
	switch src.Kind {
	case backend.KindPosix:
		return c.checkLocalLexically(src)
	case backend.KindMirror:
		for i, r := range src.Replicas {
			if err := c.CheckLexically(r, hasCredentials); err != nil {
				return fmt.Errorf("mirror replica %d: %w", i+1, err)
			}
		}
		return nil
	}
	_, err := c.Check(src, hasCredentials)
	return err
}

func (c *Checker) checkLocalLexically(src backend.Source) error {
	clean, err := c.cleanLocal(src.Path)
	if err != nil {
		return err
	}
	return c.underRoot(src.Path, clean, false)
}
