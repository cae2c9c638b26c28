package exitcode_test

import (
	"bytes"
	"errors"
	"log/slog"
	"testing"

	"github.com/epochfs/epochfs/pkg/mount/exitcode"
)

// TestFailureLineRoundTrip: every code written by LogFailure to a JSON log
// is read back by LastFailure, past other lines.
func TestFailureLineRoundTrip(t *testing.T) {
	seen := map[string]bool{}
	for _, code := range exitcode.Codes() {
		if seen[code.Reason()] {
			t.Errorf("reason %q is not unique", code.Reason())
		}
		seen[code.Reason()] = true
		var buf bytes.Buffer
		buf.WriteString("not json\n")
		log := slog.New(slog.NewJSONHandler(&buf, nil))
		log.Info("mounted", "exitCode", 99)
		exitcode.LogFailure(log, code, errors.New(`s3: list "": "quoted"`))
		buf.WriteString("cachefs: plain error line\n")
		got, ok := exitcode.LastFailure(buf.Bytes())
		want := exitcode.Failure{Code: code, Reason: code.Reason(), Error: `s3: list "": "quoted"`}
		if !ok || got != want {
			t.Errorf("LastFailure = %+v, %v; want %+v", got, ok, want)
		}
	}
	if f, ok := exitcode.LastFailure([]byte(`{"msg":"mount failed"}` + "\n")); ok {
		t.Errorf("a line without exitCode was taken: %+v", f)
	}
	if got := exitcode.Code(42).Reason(); got != "internal" {
		t.Errorf("unknown code's reason = %q", got)
	}
}
