package csi

import (
	"strings"
	"testing"
)

// TestParsePortRange: --peer-port-range in k8s.io/apimachinery's grammar,
// minus the empty range and port 0; every refusal names the flag.
func TestParsePortRange(t *testing.T) {
	for _, tc := range []struct {
		in      string
		lo, hi  int
		wantErr string // substring; "" means accepted
	}{
		{in: DefaultPeerPortRange, lo: 7400, hi: 7463},
		{in: "1-65535", lo: 1, hi: 65535},
		{in: "7400-7400", lo: 7400, hi: 7400},
		{in: "7400", lo: 7400, hi: 7400},
		{in: "7400+3", lo: 7400, hi: 7403},
		{in: " 7400-7401 ", lo: 7400, hi: 7401},
		{in: "", wantErr: "empty"},
		{in: "0-10", wantErr: "port 0"},
		{in: "0", wantErr: "port 0"},
		{in: "9-1", wantErr: "end port cannot be less than start port"},
		{in: "1-65536", wantErr: "cannot be greater than 65535"},
		{in: "65535+1", wantErr: "cannot be greater than 65535"},
		{in: "a-b", wantErr: "invalid syntax"},
		{in: "-5", wantErr: "invalid syntax"},
		{in: "1-2-3", wantErr: "invalid syntax"},
		{in: "1+2-3", wantErr: "unable to parse port range"},
		{in: "1+9223372036854775807", wantErr: "end port cannot be less than start port"},
	} {
		lo, hi, err := ParsePortRange(tc.in)
		switch {
		case tc.wantErr == "" && (err != nil || lo != tc.lo || hi != tc.hi):
			t.Errorf("ParsePortRange(%q) = %d, %d, %v; want %d, %d", tc.in, lo, hi, err, tc.lo, tc.hi)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "--peer-port-range")):
			t.Errorf("ParsePortRange(%q) = %d, %d, %v; want an error about --peer-port-range with %q", tc.in, lo, hi, err, tc.wantErr)
		}
	}
}

// FuzzParsePortRange: whatever is accepted is a usable, ordered range.
func FuzzParsePortRange(f *testing.F) {
	for _, s := range []string{DefaultPeerPortRange, "1", "0-1", "65535+0", "1+-1", " 5-6"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		lo, hi, err := ParsePortRange(s)
		if err == nil && (lo < 1 || hi > 65535 || lo > hi) {
			t.Fatalf("ParsePortRange(%q) = %d, %d: not a range of ports", s, lo, hi)
		}
	})
}
