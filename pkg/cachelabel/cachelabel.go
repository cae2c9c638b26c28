// Package cachelabel names the Node labels through which a node says which
// datasets its EpochFS cache holds: `cache.epochfs.io/<dataset-id>` with the
// cached percent ("0".."100") as the value. The CSI node plugin writes them;
// the job controller reads them to prefer nodes that already hold a job's
// datasets.
//
// The dataset ID is a stable short hash of the canonical source URL, so two
// spellings of one source (query parameters in another order, a trailing
// slash) have one ID. This package knows only pkg/backend's URL parser.
package cachelabel

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/epochfs/epochfs/pkg/backend"
)

// Prefix starts every cache label key.
const Prefix = "cache.epochfs.io/"

// idLen is the number of hex digits of a dataset ID: 64 bits, short enough
// for a label name (63 characters at most), long enough that two datasets
// of one cluster never collide in practice.
const idLen = 16

// DatasetID returns the stable ID of a dataset source URL: the first 16 hex
// digits of the SHA-256 of its canonical form (backend.Source.String). A
// malformed URL is an error from backend.Parse naming the bad part.
func DatasetID(source string) (string, error) {
	src, err := backend.Parse(source)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(src.String()))
	return hex.EncodeToString(sum[:])[:idLen], nil
}

// Key returns the Node label key for a dataset source URL:
// "cache.epochfs.io/<dataset-id>".
func Key(source string) (string, error) {
	id, err := DatasetID(source)
	if err != nil {
		return "", err
	}
	return Prefix + id, nil
}

// FormatPercent returns the label value for a cached percent, clamped to
// 0..100.
func FormatPercent(p int) string {
	return strconv.Itoa(min(max(p, 0), 100))
}

// ParsePercent parses a label value written by FormatPercent.
func ParsePercent(v string) (int, error) {
	p, err := strconv.Atoi(v)
	if err != nil || p < 0 || p > 100 {
		return 0, fmt.Errorf("cachelabel: value %q: want an integer percent 0..100", v)
	}
	return p, nil
}
