package source_test

import (
	"strings"
	"testing"

	"github.com/epochfs/epochfs/pkg/source"
)

func TestValidName(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"a.txt", true},
		{"with space", true},
		{"日本語 データ.txt", true},
		{"..hidden", true},
		{"a\\b", true},
		{strings.Repeat("x", 255), true},
		{"", false},
		{".", false},
		{"..", false},
		{"a/b", false},
		{"a\x00b", false},
		{"a\nb", false},
		{"a\x7fb", false},
		{"a\u0085b", false}, // C1 control
		{"bad\xffutf8", false},
		{strings.Repeat("x", 256), false},
	} {
		if got := source.ValidName(tc.name); got != tc.want {
			t.Errorf("ValidName(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}
