package cliusage_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/epochfs/epochfs/internal/cliusage"
)

// tree is a root with a group (job) of one leaf (get NAME, --out required
// by put), like the EpochFS CLIs.
func tree() *cobra.Command {
	root := &cobra.Command{Use: "cachefs", SilenceErrors: true, SilenceUsage: true}
	job := &cobra.Command{Use: "job"}
	get := &cobra.Command{Use: "get NAME", Args: cobra.ExactArgs(1), RunE: func(*cobra.Command, []string) error { return nil }}
	fail := &cobra.Command{Use: "fail", Args: cobra.NoArgs, RunE: func(*cobra.Command, []string) error { return errors.New("the server said no") }}
	put := &cobra.Command{Use: "put", RunE: func(*cobra.Command, []string) error { return nil }}
	put.Flags().String("out", "", "")
	_ = put.MarkFlagRequired("out")
	put.Flags().Bool("a", false, "")
	put.Flags().Bool("b", false, "")
	put.MarkFlagsMutuallyExclusive("a", "b")
	job.AddCommand(get, fail)
	root.AddCommand(job, put)
	cliusage.Mark(root)
	return root
}

func TestMark(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		usage bool // a usage error
		err   bool // an error at all
		help  bool // printed help
	}{
		{args: nil, help: true},
		{args: []string{"job"}, help: true},
		{args: []string{"job", "get", "x"}},
		{args: []string{"put", "--out", "f"}},
		{args: []string{"bogus"}, usage: true, err: true},
		{args: []string{"job", "bogus"}, usage: true, err: true},
		{args: []string{"job", "get"}, usage: true, err: true},
		{args: []string{"job", "get", "a", "b"}, usage: true, err: true},
		{args: []string{"job", "get", "--bogus", "x"}, usage: true, err: true},
		{args: []string{"--bogus"}, usage: true, err: true},
		{args: []string{"put"}, usage: true, err: true},
		{args: []string{"put", "--out", "f", "--a", "--b"}, usage: true, err: true},
		{args: []string{"job", "fail"}, err: true},
	} {
		root := tree()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs(tc.args)
		err := root.Execute()
		if (err != nil) != tc.err || cliusage.Is(err) != tc.usage {
			t.Errorf("%q: err %v (usage %v), want error %v, usage %v", tc.args, err, cliusage.Is(err), tc.err, tc.usage)
		}
		if got := strings.Contains(out.String(), "Usage:"); got != tc.help {
			t.Errorf("%q: printed help %v, want %v:\n%s", tc.args, got, tc.help, out.String())
		}
	}
	if cliusage.Is(nil) || cliusage.Is(errors.New("boom")) {
		t.Error("Is: nil and a plain error are no usage errors")
	}
}
