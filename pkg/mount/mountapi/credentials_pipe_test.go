package mountapi

import "testing"

// TestCredentialsPipeRoundTrip: what a starter writes with Lines and
// CredentialsPipe reads back as the same credentials.
func TestCredentialsPipeRoundTrip(t *testing.T) {
	for _, c := range []Credentials{
		{AccessKey: "AKID", SecretKey: "s3cr3t"},
		{AccessKey: "AKID", SecretKey: "s3cr3t", SessionToken: "tok", CephUser: "reader", CephKey: "QUJD"},
		{CephUser: "reader", CephKey: "QUJD"},
	} {
		r, err := CredentialsPipe(c.Lines())
		if err != nil {
			t.Fatal(err)
		}
		got, err := ReadCredentials(r)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got != c {
			t.Errorf("round trip of %d lines: got a different set of credentials", len(c.Lines()))
		}
	}
}
