package cliprint

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/epochfs/epochfs/internal/cliusage"
)

type sample struct {
	CapacityBytes int64  `json:"capacity_bytes"`
	Dir           string `json:"dir"`
}

func TestPrint(t *testing.T) {
	out := Output{
		Value: sample{CapacityBytes: 1 << 30, Dir: "/c"},
		Table: func(w io.Writer, wide bool) error {
			_, err := fmt.Fprintf(w, "DIR\tWIDE=%v\n", wide)
			return err
		},
		Names: func() []string { return []string{"cache/c"} },
	}
	for _, tc := range []struct{ format, want string }{
		{JSON, "{\n    \"capacity_bytes\": 1073741824,\n    \"dir\": \"/c\"\n}\n"},
		{YAML, "capacity_bytes: 1073741824\ndir: /c\n"},
		{Table, "DIR\tWIDE=false\n"},
		{Wide, "DIR\tWIDE=true\n"},
		{Name, "cache/c\n"},
	} {
		var b bytes.Buffer
		if err := Print(&b, tc.format, out); err != nil || b.String() != tc.want {
			t.Errorf("-o %q: %q, %v; want %q", tc.format, b.String(), err, tc.want)
		}
	}
	// YAML documents are separated as kubectl separates them.
	var b bytes.Buffer
	p := &Printer{Format: YAML}
	for range 2 {
		if err := p.Print(&b, Output{Value: map[string]int{"a": 1}}); err != nil {
			t.Fatal(err)
		}
	}
	if b.String() != "a: 1\n---\na: 1\n" {
		t.Errorf("two YAML documents: %q", b.String())
	}
	// Without a table, the table is the JSON.
	b.Reset()
	if err := Print(&b, Table, Output{Value: 1}); err != nil || b.String() != "1\n" {
		t.Errorf("no table: %q, %v", b.String(), err)
	}
	for _, bad := range []string{"table", "jsonpath={.a}", "JSON"} {
		if err := Check(bad); err == nil || !cliusage.Is(err) {
			t.Errorf("Check(%q) = %v, want a usage error", bad, err)
		}
		if err := Print(io.Discard, bad, out); err == nil || !cliusage.Is(err) {
			t.Errorf("Print -o %q = %v, want a usage error", bad, err)
		}
	}
	if err := Check(Name, JSON, YAML); err == nil {
		t.Error("Check(name) among json, yaml: accepted")
	}
	if err := Print(io.Discard, Name, Output{Value: 1}); err == nil || !cliusage.Is(err) {
		t.Errorf("-o name without names: %v", err)
	}
}
