package sourcepolicy

import (
	"github.com/epochfs/epochfs/pkg/source"
)

// CheckLexically is Check for a caller that does not see the node's file
// system (the job controller): a local source is judged by its cleaned path
// alone, without resolving symlinks or requiring it to exist, against the
// same rules ("/", /proc, /sys, /dev and Forbidden by name; under an allowed
// root). Network sources and mirrors are checked as by Check. It can only
// refuse early what the node would refuse: the node's Check, which resolves
// symlinks, remains the check that counts.
func (c *Checker) CheckLexically(src source.Source, hasCredentials bool) error {
	_, err := c.check(src, constCreds(hasCredentials), modeLexical, false, nounSource)
	return err
}

func (c *Checker) checkLocalLexically(src source.Source, noun string) error {
	clean, err := c.cleanLocal(src.Path, noun)
	if err != nil {
		return err
	}
	return c.underRoot(src.Path, clean, false, noun)
}
