package main

import (
	"bytes"
	"testing"
)

// TestFlagValueCompletion: the shell completes the values of --policy,
// --cache-scope, --log-format, --log-level, --progress and -o (cobra's
// __complete, what the completion scripts call).
func TestFlagValueCompletion(t *testing.T) {
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{[]string{"mount", "--policy", ""}, "nr\n:4\n"},
		{[]string{"prefetch", "--policy", ""}, "nr\n:4\n"},
		{[]string{"mount", "--cache-scope", ""}, "node\ncluster\n:4\n"},
		{[]string{"prefetch", "--cache-scope", "c"}, "node\ncluster\n:4\n"},
		{[]string{"mount", "--log-format", ""}, "text\njson\n:4\n"},
		{[]string{"stats", "--log-format", "j"}, "text\njson\n:4\n"},
		{[]string{"index", "--log-level", "w"}, "debug\ninfo\nwarn\nerror\n:4\n"},
		{[]string{"index", "--progress", ""}, "auto\nlines\nnone\n:4\n"},
		{[]string{"index", "-o", ""}, "json\nyaml\nwide\nname\n:4\n"},
		{[]string{"prefetch", "-o", "y"}, "json\nyaml\nwide\nname\n:4\n"},
	} {
		root := newRoot()
		var out, errb bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&errb)
		root.SetArgs(append([]string{"__complete"}, tc.words...))
		if err := root.Execute(); err != nil || out.String() != tc.want {
			t.Errorf("__complete %q: %q, %v; want %q", tc.words, out.String(), err, tc.want)
		}
	}
}
