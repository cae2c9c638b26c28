package backend_test

import (
	"strings"
	"testing"

	"github.com/epochfs/epochfs/pkg/backend"
)

func TestCredentialsNeverPrinted(t *testing.T) {
	c := backend.Credentials{AccessKey: "AKIAEXAMPLE", SecretKey: "s3cr3t", SessionToken: "t0ken"}
	for _, s := range []string{c.String(), c.GoString(), c.LogValue().String()} {
		if strings.Contains(s, "s3cr3t") || strings.Contains(s, "t0ken") || strings.Contains(s, "AKIAEXAMPLE") {
			t.Errorf("credentials printed: %s", s)
		}
	}
}
