// Package cliusage gives the EpochFS command lines (cachefs, cachefs-job)
// one rule for usage errors: an unknown command or flag, a bad flag value,
// or the wrong arguments is an *Error, which the mains turn into exit code
// 2 (pkg/mount/exitcode.Usage), as `cachefs mount` always did; any other
// failure exits 1 or its own documented code.
//
// Why not cobra alone: cobra returns its usage errors as plain errors, so a
// main cannot tell them from a failed run, and a group command (one with
// subcommands and no Run of its own) given an unknown subcommand prints its
// help and succeeds.
package cliusage

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// Error is a usage error of a command line.
type Error struct{ Err error }

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether err is, or wraps, a usage error, or is one of the
// validation errors cobra returns untyped from Execute: a required flag not
// set, or flags of a group given apart. Those are recognized by cobra's
// fixed message prefixes (cobra v1 has no error types for them).
func Is(err error) bool {
	var u *Error
	if errors.As(err, &u) {
		return true
	}
	if err == nil {
		return false
	}
	m := err.Error()
	for _, p := range cobraUsagePrefixes {
		if strings.HasPrefix(m, p) {
			return true
		}
	}
	return false
}

// cobraUsagePrefixes start the messages of cobra's untyped validation
// errors (command.go ValidateRequiredFlags, flag_groups.go).
var cobraUsagePrefixes = []string{
	"required flag(s) ",
	"if any flags in the group ",
	"at least one of the flags in the group ",
}

// Errorf returns a usage error.
func Errorf(format string, args ...any) error { return &Error{Err: fmt.Errorf(format, args...)} }

// Mark makes every usage error of root's tree an *Error: flag errors (for
// every command: cobra inherits the root's flag error function), argument
// errors (each command's Args wrapped), and unknown subcommands of group
// commands (which then print their help only when called bare). Call it
// once the tree is built.
func Mark(root *cobra.Command) {
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &Error{Err: err} })
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if args := c.Args; args != nil {
			c.Args = func(cmd *cobra.Command, a []string) error {
				if err := args(cmd, a); err != nil {
					return &Error{Err: err}
				}
				return nil
			}
		}
		if c.HasSubCommands() && c.Run == nil && c.RunE == nil {
			c.Args = cobra.ArbitraryArgs
			c.RunE = func(cmd *cobra.Command, a []string) error {
				if len(a) > 0 {
					return Errorf("unknown command %q for %q (see %s --help)", a[0], cmd.CommandPath(), cmd.CommandPath())
				}
				return cmd.Help()
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}
