// Package cliprint is the one output dialect of the EpochFS command lines
// (cachefs, cachefs job): -o json|yaml|wide|name, and a table by default, as
// kubectl prints. A command hands Print a value (encoded for json and yaml
// through its struct tags, snake_case keys), a table writer (the table and
// -o wide) and a name func (-o name); the flag, its completion, the check of
// its value and the encodings live here once.
//
// JSON and YAML are encoded as k8s.io/cli-runtime's JSONPrinter and
// YAMLPrinter do (4-space indented JSON; sigs.k8s.io/yaml, "---" between
// documents; & < > are not escaped), so that cachefs job's objects print as kubectl prints them,
// without linking cli-runtime (and client-go) into cachefs, the per-dataset
// mount binary.
//
// It knows nothing of what is printed; it imports no other EpochFS package
// but internal/cliusage.
package cliprint

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/epochfs/epochfs/internal/cliusage"
)

// The -o values. Table ("") is the default: no -o.
const (
	Table = ""
	JSON  = "json"
	YAML  = "yaml"
	Wide  = "wide"
	Name  = "name"
)

// All is every -o value, in the order help lists them.
var All = []string{JSON, YAML, Wide, Name}

// Output is what one command prints, in each format.
type Output struct {
	// Value is encoded for json and yaml (through its json struct tags).
	Value any
	// Table writes the table; wide: the -o wide one, with more columns.
	// nil: the command has no table, and prints Value's JSON instead.
	Table func(w io.Writer, wide bool) error
	// Names returns the lines of -o name (kind/name); nil: -o name is
	// not offered.
	Names func() []string
}

// AddFlag adds -o/--output to cmd, storing into p, with the values allowed
// (All when none are given) and their shell completion. what says what the
// default prints ("a table", "a summary").
func AddFlag(cmd *cobra.Command, p *string, what string, allowed ...string) {
	if len(allowed) == 0 {
		allowed = All
	}
	cmd.Flags().StringVarP(p, "output", "o", "", fmt.Sprintf("output `FORMAT`, one of: %s (default: %s)", strings.Join(allowed, ", "), what))
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(allowed, cobra.ShellCompDirectiveNoFileComp))
}

// Check accepts "" (the table) and the allowed formats (All when none are
// given); anything else is a usage error (cliusage: exit 2) listing them.
func Check(format string, allowed ...string) error {
	if len(allowed) == 0 {
		allowed = All
	}
	if format == Table || slices.Contains(allowed, format) {
		return nil
	}
	return cliusage.Errorf("-o %q: unknown output format; allowed: %s", format, strings.Join(allowed, ", "))
}

// Printer prints Outputs in one format. It counts the YAML documents it
// wrote so that the next one is preceded by "---", as kubectl separates
// them. Not safe for concurrent use.
type Printer struct {
	Format string
	docs   int
}

// Print prints out to w in p's format.
func (p *Printer) Print(w io.Writer, out Output) error {
	switch p.Format {
	case JSON:
		return writeJSON(w, out.Value)
	case YAML:
		b, err := yaml.Marshal(out.Value)
		if err != nil {
			return fmt.Errorf("cliprint: yaml: %w", err)
		}
		if p.docs++; p.docs > 1 {
			if _, err := io.WriteString(w, "---\n"); err != nil {
				return err
			}
		}
		_, err = w.Write(b)
		return err
	case Name:
		if out.Names == nil {
			return cliusage.Errorf("-o name: this command prints no named objects")
		}
		for _, n := range out.Names() {
			if _, err := fmt.Fprintln(w, n); err != nil {
				return err
			}
		}
		return nil
	case Table, Wide:
		if out.Table == nil {
			return writeJSON(w, out.Value)
		}
		return out.Table(w, p.Format == Wide)
	}
	return Check(p.Format)
}

// Print prints out to w in format (see Printer).
func Print(w io.Writer, format string, out Output) error {
	return (&Printer{Format: format}).Print(w, out)
}

func writeJSON(w io.Writer, v any) error {
	// Unlike json.MarshalIndent (and so cli-runtime), & < > stay as they
	// are: URLs with query strings are printed, not read by a browser.
	enc := json.NewEncoder(w)
	enc.SetIndent("", "    ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("cliprint: json: %w", err)
	}
	return nil
}
