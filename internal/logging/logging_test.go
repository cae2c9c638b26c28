package logging

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		name, format, level string
		wantErr             string // "" when New must succeed
	}{
		{name: "text", format: "text", level: "info"},
		{name: "json", format: "json", level: "debug"},
		{name: "any case", format: "JSON", level: "WARN"},
		{name: "bad format", format: "yaml", level: "info", wantErr: `--log-format "yaml": want text or json`},
		{name: "empty format", format: "", level: "info", wantErr: `--log-format "": want text or json`},
		{name: "bad level", format: "text", level: "loud", wantErr: `--log-level "loud": want debug, info, warn or error`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			log, err := New(&buf, tc.format, tc.level)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("New(%q, %q) = %v, want error %q", tc.format, tc.level, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("New(%q, %q): %v", tc.format, tc.level, err)
			}
			log.Error("hello", "k", "v")
			if !strings.Contains(buf.String(), "hello") {
				t.Fatalf("log output %q lacks the message", buf.String())
			}
		})
	}
}

func TestNewLevelAndFormat(t *testing.T) {
	var buf bytes.Buffer
	log, err := New(&buf, "json", "warn")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("dropped")
	log.Warn("kept", "k", "v")
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("want one JSON record, got %q: %v", buf.String(), err)
	}
	if rec["msg"] != "kept" || rec["level"] != "WARN" || rec["k"] != "v" {
		t.Fatalf("record = %v, want msg=kept level=WARN k=v", rec)
	}
}
