package mountapi_test

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// secretValue is in every test input; no error may contain it.
const secretValue = "s3cr3t-VALUE-never-echoed"

func TestReadCredentials(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    mountapi.Credentials
		wantErr string // substring; "" for success
	}{
		{"pair", "AWS_ACCESS_KEY_ID=AK\nAWS_SECRET_ACCESS_KEY=" + secretValue + "\n",
			mountapi.Credentials{AccessKey: "AK", SecretKey: secretValue}, ""},
		{"with token, no final newline, empty lines", "\nAWS_SESSION_TOKEN=tok\n\nAWS_ACCESS_KEY_ID=AK\nAWS_SECRET_ACCESS_KEY=" + secretValue,
			mountapi.Credentials{AccessKey: "AK", SecretKey: secretValue, SessionToken: "tok"}, ""},
		{"value with =", "AWS_ACCESS_KEY_ID=AK\nAWS_SECRET_ACCESS_KEY=a=b" + secretValue + "\n",
			mountapi.Credentials{AccessKey: "AK", SecretKey: "a=b" + secretValue}, ""},
		{"ceph pair", "userID=dataset-reader\nuserKey=" + secretValue + "\n",
			mountapi.Credentials{CephUser: "dataset-reader", CephKey: secretValue}, ""},
		{"both pairs", "AWS_ACCESS_KEY_ID=AK\nAWS_SECRET_ACCESS_KEY=" + secretValue + "\nuserID=u\nuserKey=" + secretValue + "\n",
			mountapi.Credentials{AccessKey: "AK", SecretKey: secretValue, CephUser: "u", CephKey: secretValue}, ""},
		{"empty", "", mountapi.Credentials{}, "no credentials: want AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or userID and userKey"},
		{"ceph key missing", "userID=u\n", mountapi.Credentials{}, "userID and userKey are both required"},
		{"ceph user missing", "userKey=" + secretValue + "\n", mountapi.Credentials{}, "userID and userKey are both required"},
		{"token alone", "AWS_SESSION_TOKEN=" + secretValue + "\nuserID=u\nuserKey=k\n", mountapi.Credentials{}, "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are both required"},
		{"secret missing", "AWS_ACCESS_KEY_ID=AK\nAWS_SESSION_TOKEN=" + secretValue + "\n", mountapi.Credentials{}, "are both required"},
		{"empty secret", "AWS_ACCESS_KEY_ID=AK\nAWS_SECRET_ACCESS_KEY=\n", mountapi.Credentials{}, "are both required"},
		{"not KEY=VALUE", "AWS_ACCESS_KEY_ID=AK\n" + secretValue + "\n", mountapi.Credentials{}, "line 2 is not KEY=VALUE"},
		{"unknown key", secretValue + "=x\nAWS_ACCESS_KEY_ID=AK\n", mountapi.Credentials{}, "line 1: unknown key (want one of AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, userID, userKey)"},
		{"lower-case key", "aws_access_key_id=AK\n", mountapi.Credentials{}, "line 1: unknown key"},
		{"duplicate", "AWS_SECRET_ACCESS_KEY=" + secretValue + "\nAWS_SECRET_ACCESS_KEY=" + secretValue + "\n", mountapi.Credentials{}, "line 2: AWS_SECRET_ACCESS_KEY given twice"},
		{"NUL", "AWS_ACCESS_KEY_ID=AK\nAWS_SECRET_ACCESS_KEY=" + secretValue + "\x00\n", mountapi.Credentials{}, "line 2: the value of AWS_SECRET_ACCESS_KEY holds a NUL or carriage return"},
		{"CRLF", "AWS_ACCESS_KEY_ID=AK\r\nAWS_SECRET_ACCESS_KEY=" + secretValue + "\r\n", mountapi.Credentials{}, "line 1: the value of AWS_ACCESS_KEY_ID holds a NUL"},
		{"too large", "AWS_ACCESS_KEY_ID=AK\nAWS_SECRET_ACCESS_KEY=" + secretValue + strings.Repeat("x", mountapi.MaxCredentialsSize) + "\n", mountapi.Credentials{}, "over 16384 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := mountapi.ReadCredentials(strings.NewReader(tc.in))
			if tc.wantErr == "" {
				if err != nil || got != tc.want {
					t.Fatalf("ReadCredentials = %v, %v; want %v", got, err, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ReadCredentials error = %v, want one containing %q", err, tc.wantErr)
			}
			if strings.Contains(err.Error(), secretValue) {
				t.Errorf("the error echoes a value: %v", err)
			}
			if !errors.Is(err, mountapi.ErrCredentials) {
				t.Errorf("error %v: not ErrCredentials", err)
			}
			if got != (mountapi.Credentials{}) {
				t.Errorf("credentials returned with an error: %v", got)
			}
		})
	}
}

// TestReadCredentialsFD reads from a pipe's read end and closes it; a
// closed descriptor is an error naming the flag.
func TestReadCredentialsFD(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteString("AWS_ACCESS_KEY_ID=AK\nAWS_SECRET_ACCESS_KEY=" + secretValue + "\n"); err != nil {
		t.Fatal(err)
	}
	w.Close()
	// A duplicate that no *os.File owns: r's finalizer would otherwise
	// close the same fd number again at some later GC, when it may belong
	// to another test's socket (it closed TestEndlessListingRefused's S3
	// server listener: connection refused).
	fd, err := syscall.Dup(int(r.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	c, err := mountapi.ReadCredentialsFD(fd)
	if err != nil || c.SecretKey != secretValue {
		t.Fatalf("ReadCredentialsFD = %v, %v", c, err)
	}
	_, err = mountapi.ReadCredentialsFD(fd) // closed by the first call
	if err == nil || !strings.Contains(err.Error(), "--credentials-fd") || !errors.Is(err, mountapi.ErrCredentials) {
		t.Fatalf("second read of a closed fd: %v, want an ErrCredentials naming --credentials-fd", err)
	}
	if _, err := mountapi.ReadCredentialsFD(-1); !errors.Is(err, mountapi.ErrCredentials) {
		t.Fatalf("fd -1: %v", err)
	}
}

// FuzzReadCredentials: any input either parses to a complete pair or
// fails with an error that echoes no line of it.
func FuzzReadCredentials(f *testing.F) {
	f.Add("AWS_ACCESS_KEY_ID=AK\nAWS_SECRET_ACCESS_KEY=SK\n")
	f.Add("AWS_SESSION_TOKEN=t\n\n=\nx")
	f.Add("AWS_ACCESS_KEY_ID=A\x00K\n")
	f.Fuzz(func(t *testing.T, in string) {
		c, err := mountapi.ReadCredentials(strings.NewReader(in))
		if err == nil {
			if c.AccessKey == "" || c.SecretKey == "" {
				t.Fatalf("success without a pair: %v", c)
			}
			return
		}
		// The messages' own words may happen to equal a value.
		const fixed = "mount: invalid configuration: bad credentials input: line unknown key (want one of " +
			"AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) is not KEY=VALUE given twice " +
			"the value of holds a NUL or carriage return over 16384 bytes and are both required"
		for _, line := range strings.Split(in, "\n") {
			_, v, _ := strings.Cut(line, "=")
			if len(v) >= 8 && strings.Contains(err.Error(), v) && !strings.Contains(fixed, v) {
				t.Fatalf("error %q echoes the value %q", err, v)
			}
		}
	})
}
