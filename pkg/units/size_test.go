package units

import (
	"errors"
	"testing"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  string
	}{
		{in: "1", want: 1},
		{in: "4096", want: 4096},
		{in: "10B", want: 10},
		{in: "1K", want: 1000},
		{in: "1KB", want: 1000},
		{in: "1KiB", want: 1024},
		{in: "1kib", want: 1024},
		{in: "512MiB", want: 512 << 20},
		{in: "2M", want: 2_000_000},
		{in: "10G", want: 10_000_000_000},
		{in: "10GB", want: 10_000_000_000},
		{in: "50GiB", want: 50 << 30},
		{in: " 50 GiB ", want: 50 << 30},
		{in: "1.5GiB", want: 3 << 29},
		{in: "1.3GiB", want: 1395864371}, // 1395864371.2, rounded down
		{in: "0.5KiB", want: 512},
		{in: "2TiB", want: 2 << 40},
		{in: "50Gi", want: 50 << 30}, // Kubernetes quantity spelling
		{in: "512Mi", want: 512 << 20},
		{in: "1T", want: 1e12},
		{in: "1TB", want: 1e12},
		{in: "7EiB", want: 7 << 60},
		{in: "9223372036854775807", want: 9223372036854775807},
		{in: "", err: `invalid size "": empty`},
		{in: "   ", err: `invalid size "   ": empty`},
		{in: "GiB", err: `invalid size "GiB": want a number with an optional unit (B, K, KB, KiB, Ki, M, MB, MiB, Mi, G, GB, GiB, Gi, T, TB, TiB, Ti, P, PB, PiB, Pi, E, EB, EiB, Ei)`},
		{in: "abc", err: `invalid size "abc": want a number with an optional unit (B, K, KB, KiB, Ki, M, MB, MiB, Mi, G, GB, GiB, Gi, T, TB, TiB, Ti, P, PB, PiB, Pi, E, EB, EiB, Ei)`},
		{in: "1.2.3G", err: `invalid size "1.2.3G": want a number with an optional unit (B, K, KB, KiB, Ki, M, MB, MiB, Mi, G, GB, GiB, Gi, T, TB, TiB, Ti, P, PB, PiB, Pi, E, EB, EiB, Ei)`},
		{in: "-1G", err: `invalid size "-1G": negative`},
		{in: "+1G", err: `invalid size "+1G": want a number with an optional unit (B, K, KB, KiB, Ki, M, MB, MiB, Mi, G, GB, GiB, Gi, T, TB, TiB, Ti, P, PB, PiB, Pi, E, EB, EiB, Ei)`},
		{in: "500m", err: `invalid size "500m": "m" is milli in Kubernetes quantities, not a byte unit: write 500M (megabytes) or 500Mi (mebibytes)`},
		{in: "500M", want: 500_000_000},
		{in: "500mb", want: 500_000_000}, // spelled out: no quantity reads it as milli
		{in: "1.5Ti", want: 3 << 39},
		{in: "500G", want: 500e9},
		{in: "0", err: `invalid size "0": must be greater than zero`},
		{in: "0GiB", err: `invalid size "0GiB": must be greater than zero`},
		{in: "0.1B", err: `invalid size "0.1B": must be greater than zero`},
		{in: "10X", err: `invalid size "10X": unknown unit "X" (want one of B, K, KB, KiB, Ki, M, MB, MiB, Mi, G, GB, GiB, Gi, T, TB, TiB, Ti, P, PB, PiB, Pi, E, EB, EiB, Ei)`},
		{in: "10 GiBs", err: `invalid size "10 GiBs": unknown unit "GiBs" (want one of B, K, KB, KiB, Ki, M, MB, MiB, Mi, G, GB, GiB, Gi, T, TB, TiB, Ti, P, PB, PiB, Pi, E, EB, EiB, Ei)`},
		{in: "1e3", err: `invalid size "1e3": unknown unit "e3" (want one of B, K, KB, KiB, Ki, M, MB, MiB, Mi, G, GB, GiB, Gi, T, TB, TiB, Ti, P, PB, PiB, Pi, E, EB, EiB, Ei)`},
		{in: "8EiB", err: `invalid size "8EiB": too large (the maximum is 9223372036854775807 bytes)`},
		{in: "9223372036854775808", err: `invalid size "9223372036854775808": too large (the maximum is 9223372036854775807 bytes)`},
		{in: "99999999999999999999999TiB", err: `invalid size "99999999999999999999999TiB": too large (the maximum is 9223372036854775807 bytes)`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSize(tt.in)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err || !errors.Is(err, ErrInvalidSize) {
					t.Fatalf("ParseSize(%q) = %d, %v; want error %q", tt.in, got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestFormatSize(t *testing.T) {
	tests := []struct {
		in   int64
		want string
	}{
		{0, "0B"},
		{1, "1B"},
		{1023, "1023B"},
		{1024, "1KiB"},
		{1536, "1.5KiB"},
		{512 << 20, "512MiB"},
		{50 << 30, "50GiB"},
		{3 << 29, "1.5GiB"},
		{1e9, "953.67MiB"},
		{160e9, "149.01GiB"},
		{2 << 40, "2TiB"},
		{7 << 60, "7EiB"},
		{-2048, "-2KiB"},
	}
	for _, tt := range tests {
		if got := FormatSize(tt.in); got != tt.want {
			t.Errorf("FormatSize(%d) = %q, want %q", tt.in, got, tt.want)
		}
	}
	// Exact multiples round-trip.
	for _, n := range []int64{1, 1000, 1024, 3 << 29, 50 << 30, 1 << 62} {
		if got, err := ParseSize(FormatSize(n)); err != nil || got != n {
			t.Errorf("ParseSize(FormatSize(%d)) = %d, %v", n, got, err)
		}
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"50GiB", "1.5G", "-1", "0", "10 kb", "8EiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err == nil && n <= 0 {
			t.Fatalf("ParseSize(%q) = %d, want > 0", s, n)
		}
		if err != nil && !errors.Is(err, ErrInvalidSize) {
			t.Fatalf("ParseSize(%q): %v does not wrap ErrInvalidSize", s, err)
		}
	})
}

// TestSizeValue: Size is a flag value with ParseSize's grammar and errors.
func TestSizeValue(t *testing.T) {
	var s Size
	if s.String() != "" || s.Type() != "SIZE" {
		t.Errorf("zero Size: %q, type %q", s.String(), s.Type())
	}
	if err := s.Set("1.5GiB"); err != nil || s.Bytes() != 3<<29 || s.String() != "1.5GiB" {
		t.Errorf("Set(1.5GiB): %v, %d, %q", err, s.Bytes(), s.String())
	}
	for _, bad := range []string{"500m", "-1", "0", "", "lots"} {
		before := s
		if err := s.Set(bad); !errors.Is(err, ErrInvalidSize) || s != before {
			t.Errorf("Set(%q): %v, value %d (was %d)", bad, err, s, before)
		}
	}
}
