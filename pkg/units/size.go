// Package units parses and formats byte sizes for every flag, CSI volume
// parameter and TrainingJob field that takes one ("50GiB", "512Mi", "10G").
// It is a leaf package: it knows nothing of caches, volumes or jobs.
//
// Why not k8s.io/apimachinery's resource.Quantity: it refuses the "GiB"/"GB"
// spellings users type on a command line ("50GiB"), accepts forms that make no
// sense for a byte count (milli units, exponents), and would pull apimachinery
// into the per-dataset mount binary. The Kubernetes spellings (Ki, Mi, Gi, …)
// are accepted here with the same meaning.
package units

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// ErrInvalidSize is wrapped by every ParseSize error.
var ErrInvalidSize = errors.New("invalid size")

// sizeUnits maps a lower-cased unit suffix to its multiplier. Decimal SI
// units (K, KB, M, MB, G, GB, T, TB, P, PB, E, EB) are powers of 1000; binary
// units (KiB, MiB, GiB, TiB, PiB, EiB, and the Kubernetes quantity spellings
// Ki, Mi, Gi, Ti, Pi, Ei) are powers of 1024.
var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1e3, "kb": 1e3, "kib": 1 << 10, "ki": 1 << 10,
	"m": 1e6, "mb": 1e6, "mib": 1 << 20, "mi": 1 << 20,
	"g": 1e9, "gb": 1e9, "gib": 1 << 30, "gi": 1 << 30,
	"t": 1e12, "tb": 1e12, "tib": 1 << 40, "ti": 1 << 40,
	"p": 1e15, "pb": 1e15, "pib": 1 << 50, "pi": 1 << 50,
	"e": 1e18, "eb": 1e18, "eib": 1 << 60, "ei": 1 << 60,
}

const sizeUnitList = "B, K, KB, KiB, Ki, M, MB, MiB, Mi, G, GB, GiB, Gi, T, TB, TiB, Ti, P, PB, PiB, Pi, E, EB, EiB, Ei"

// SizeSchemaPattern is the chart's JSON-schema pattern for a byte size
// (deploy/helm/epochfs/values.schema.json, $defs/byteSize; a test in
// pkg/csi checks the two are the same string). It is valid in both RE2 and
// ECMA-262 and accepts a subset of what ParseSize accepts: a number that
// starts with a non-zero digit (so never zero, and never one that rounds
// down to zero bytes), at most one space, and a unit of sizeUnits in any
// case but a lone lower-case "m". The one value it accepts that ParseSize
// refuses is a size too large for an int64 (over 8EiB).
const SizeSchemaPattern = `^[1-9][0-9]*(\.[0-9]+)? ?([KkGgTtPpEe]|M|[KkMmGgTtPpEe]([Ii][Bb]?|[Bb])|[Bb])?$`

// ParseSize parses a byte size such as "50GiB", "512MiB", "10G", "1.5GiB"
// or "4096".
//
// Units are case-insensitive, but for a lone lower-case "m": Kubernetes
// quantities read "500m" as 0.5 (milli), so it is refused, naming M and Mi.
// Decimal SI units are powers of 1000 (K and KB = 10^3, M/MB = 10^6, G/GB =
// 10^9, T/TB = 10^12, P/PB, E/EB); binary units are powers of 1024 (KiB =
// 2^10, MiB = 2^20, GiB = 2^30, TiB = 2^40, PiB, EiB; Kubernetes' Ki, Mi, Gi,
// Ti, Pi, Ei mean the same). No unit, or B, means bytes. Spaces around the
// number and between the number and the unit are allowed. A fractional
// number is allowed; the result is rounded down to a whole number of bytes.
//
// The result is always > 0. Every error wraps ErrInvalidSize and quotes the
// input: empty input, junk, a negative number, an unknown unit, a size that
// rounds down to zero, and a size that does not fit in an int64.
func ParseSize(s string) (int64, error) {
	fail := func(format string, args ...any) (int64, error) {
		return 0, fmt.Errorf("%w %q: %s", ErrInvalidSize, s, fmt.Sprintf(format, args...))
	}
	t := strings.TrimSpace(s)
	if t == "" {
		return fail("empty")
	}
	if t[0] == '-' {
		return fail("negative")
	}
	// Split into the number (digits with at most one '.') and the unit.
	end, dots, digits := 0, 0, 0
	for end < len(t) {
		c := t[end]
		if c >= '0' && c <= '9' {
			digits++
		} else if c == '.' {
			dots++
		} else {
			break
		}
		end++
	}
	num, unit := t[:end], strings.TrimSpace(t[end:])
	if digits == 0 || dots > 1 {
		return fail("want a number with an optional unit (%s)", sizeUnitList)
	}
	if unit == "m" {
		// Case matters here, as in Kubernetes quantities: "500m" is 0.5 there
		// (milli), and would be 500 MB here; refuse it rather than guess.
		return fail(`"m" is milli in Kubernetes quantities, not a byte unit: write %sM (megabytes) or %sMi (mebibytes)`, num, num)
	}
	mult, ok := sizeUnits[strings.ToLower(unit)]
	if !ok {
		return fail("unknown unit %q (want one of %s)", unit, sizeUnitList)
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return fail("want a number with an optional unit (%s)", sizeUnitList)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	n := new(big.Int).Quo(r.Num(), r.Denom()) // both positive: Quo rounds down
	if !n.IsInt64() {
		return fail("too large (the maximum is %d bytes)", int64(math.MaxInt64))
	}
	if n.Sign() == 0 {
		return fail("must be greater than zero")
	}
	return n.Int64(), nil
}

// FormatSize formats n bytes with the largest binary unit (KiB, MiB, GiB,
// TiB, PiB, EiB) that keeps the number >= 1, with at most two decimals and no
// trailing zeros: 0 -> "0B", 512 -> "512B", 1536 -> "1.5KiB", 50<<30 ->
// "50GiB". Exact multiples round-trip through ParseSize.
func FormatSize(n int64) string {
	if n < 0 {
		if n == math.MinInt64 {
			return "-8EiB"
		}
		return "-" + FormatSize(-n)
	}
	const units = "KMGTPE"
	if n < 1<<10 {
		return strconv.FormatInt(n, 10) + "B"
	}
	i, div := 0, int64(1<<10)
	for i+1 < len(units) && n/div >= 1<<10 {
		i++
		div <<= 10
	}
	v := strconv.FormatFloat(float64(n)/float64(div), 'f', 2, 64)
	v = strings.TrimRight(strings.TrimRight(v, "0"), ".")
	return v + string(units[i]) + "iB"
}

// Size is a byte size as a command-line flag value: it implements
// pflag.Value and flag.Value, so a bad value is refused when the flags are
// parsed, with ParseSize's message, and --help reads "--cache-size SIZE …
// (default 4MiB)". The zero Size prints as "" (no default shown); Set never
// stores zero (ParseSize refuses it).
type Size int64

// Set parses v with ParseSize.
func (s *Size) Set(v string) error {
	n, err := ParseSize(v)
	if err != nil {
		return err
	}
	*s = Size(n)
	return nil
}

// String formats s with FormatSize, "" for 0.
func (s Size) String() string {
	if s == 0 {
		return ""
	}
	return FormatSize(int64(s))
}

// Type is the placeholder of the value in --help.
func (*Size) Type() string { return "SIZE" }

// Bytes returns s as a byte count.
func (s Size) Bytes() int64 { return int64(s) }
