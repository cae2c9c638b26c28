package ceph

import (
	"os"
	"path/filepath"
	"testing"
)

// TestLoad reads the env files scripts/ceph-server.sh writes, as a
// reused cluster (EPOCHFS_CEPH_DIR) is found.
func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("env", "CEPH_CONF="+dir+"/ceph.conf\nCEPH_MON=127.0.0.1:13300\nMON_V2_PORT=13300\nMON_V1_PORT=16789\nFS_NAME=cephfs\nRGW_ENDPOINT=http://127.0.0.1:18000\n")
	write("s3.env", "RGW_ACCESS_KEY=epochfsabc\nRGW_SECRET_KEY=s3cr3t\n")
	c, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.Conf != dir+"/ceph.conf" || c.Mon != "127.0.0.1:13300" || c.FS != "cephfs" || c.owned {
		t.Errorf("Load = %+v", c)
	}
	if c.RGW == nil || c.RGW.Endpoint != "http://127.0.0.1:18000" || c.RGW.Host != "127.0.0.1:18000" ||
		c.RGW.AccessKey != "epochfsabc" || c.RGW.SecretKey != "s3cr3t" || c.RGW.Client() == nil {
		t.Errorf("Load RGW = %+v", c.RGW)
	}
	if got, want := c.URL("/a/b"), "cephfs://admin@127.0.0.1:13300/a/b?fs=cephfs"; got != want {
		t.Errorf("URL = %q, want %q", got, want)
	}
	write("env", "CEPH_CONF=/x\n")
	if _, err := Load(dir); err == nil {
		t.Error("Load of an env without CEPH_MON and FS_NAME: no error")
	}
}
