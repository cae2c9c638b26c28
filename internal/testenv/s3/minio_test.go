package s3

import (
	"context"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/epochfs/epochfs/internal/testenv"
)

func TestStartMinIOMissingBinary(t *testing.T) {
	t.Setenv("EPOCHFS_TOOLS_BIN", t.TempDir())
	t.Setenv("PATH", t.TempDir())
	t.Chdir(t.TempDir()) // no repository root: no .tools/bin
	t.Setenv("CI", "true")
	end := testenv.RunHelper(t, func(tb testing.TB) { StartMinIO(tb) })
	if !end.Fatal || !strings.Contains(end.Msg, "minio not found: run `make tools`") {
		t.Errorf("fatal=%v msg=%q", end.Fatal, end.Msg)
	}
}

func TestStartMinIO(t *testing.T) {
	var host string
	t.Run("running", func(t *testing.T) {
		m := StartMinIO(t)
		host = m.Host
		m.MakeBucket(t, "smoke")
		m.Put(t, "smoke", "dir/with space ✓", []byte("hello"))
		obj, err := m.Client().GetObject(context.Background(), "smoke", "dir/with space ✓", minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer obj.Close()
		buf := make([]byte, 5)
		if _, err := obj.Read(buf); string(buf) != "hello" {
			t.Fatalf("read back %q, %v", buf, err)
		}
		m.Restart(t)
		if _, err := m.Client().StatObject(context.Background(), "smoke", "dir/with space ✓", minio.StatObjectOptions{}); err != nil {
			t.Fatalf("after Restart: %v", err)
		}
	})
	if host == "" {
		return // skipped
	}
	// After the subtest's cleanup the server is gone.
	testenv.WaitClosed(t, host, "minio")
}
