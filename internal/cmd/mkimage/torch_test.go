package main

import (
	"archive/tar"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTorchExampleImage builds the torch-example image from a stand-in
// root filesystem tar (python3 and torchrun, as Debian's packages put them)
// and an examples directory with a local run's byte-code cache and a Go
// test: the examples layer holds the directories down to
// /opt/epochfs/examples/pytorch and the scripts (readable by all), not the
// cache or the test, and /usr/local/bin/torchrun runs the patched launcher
// (sh runs it here with a stand-in python3 that prints its arguments); a
// directory without train.py or torchrun.py is refused.
func TestTorchExampleImage(t *testing.T) {
	dir := t.TempDir()
	rootfsPath := filepath.Join(dir, "rootfs.tar")
	f, err := os.Create(rootfsPath)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	for _, h := range []*tar.Header{
		{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./usr/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./usr/bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./usr/bin/python3.11", Typeflag: tar.TypeReg, Mode: 0o755},
		{Name: "./usr/bin/python3", Typeflag: tar.TypeSymlink, Linkname: "python3.11", Mode: 0o777},
		{Name: "./usr/bin/torchrun", Typeflag: tar.TypeReg, Mode: 0o755},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	examples := filepath.Join(dir, "examples", "pytorch")
	for name, mode := range map[string]os.FileMode{"train.py": 0o600, "torchrun.py": 0o644, "README.md": 0o644,
		"train_test.go": 0o644, "__pycache__/train.cpython-311.pyc": 0o644, "stray.pyc": 0o644} {
		p := filepath.Join(examples, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("# "+name), mode); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "torch.tar")
	if err := run([]string{"torch-example", "-rootfs", rootfsPath, "-examples", examples, "-ref", "epochfs/torch-example:v9", "-out", out}); err != nil {
		t.Fatal(err)
	}
	tag, cfg, files, layers := imageFiles(t, out)
	if tag != "epochfs/torch-example:v9" || layers != 2 {
		t.Fatalf("tag %s, %d layers, want epochfs/torch-example:v9 with 2", tag, layers)
	}
	want := map[string]string{
		"usr/bin/python3.11": "0:755", "usr/bin/python3": "2:777", "usr/bin/torchrun": "0:755",
		"opt": "5:755", "opt/epochfs": "5:755", "opt/epochfs/examples": "5:755", "opt/epochfs/examples/pytorch": "5:755",
		"opt/epochfs/examples/pytorch/train.py": "0:644", "opt/epochfs/examples/pytorch/README.md": "0:644",
		"opt/epochfs/examples/pytorch/torchrun.py": "0:644", "usr/local/bin/torchrun": "0:755",
	}
	for name, mode := range want {
		if files[name] != mode {
			t.Errorf("%s: %q, want %q", name, files[name], mode)
		}
	}
	for name := range files {
		if strings.Contains(name, "__pycache__") || strings.HasSuffix(name, ".pyc") || strings.HasSuffix(name, ".go") {
			t.Errorf("byte-code cache or Go test %s in the image", name)
		}
	}
	if got := fmt.Sprintf("%v %v %v %v", cfg["Cmd"], cfg["WorkingDir"], cfg["Env"], cfg["Entrypoint"]); got !=
		"[python3] /opt/epochfs/examples/pytorch [PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin PYTHONDONTWRITEBYTECODE=1] <nil>" {
		t.Errorf("config: %s", got)
	}
	if fileExists(out + ".examples-layer") {
		t.Error("the examples layer's temporary file is left")
	}

	// The wrapper, run by sh with a python3 that echoes its arguments.
	bin := filepath.Join(dir, "fakebin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "python3"), []byte("#!/bin/sh\necho \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", torchrun, "torchrun", "--nnodes", "2", "train.py", "--data", "/d a")
	cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
	if got, err := cmd.CombinedOutput(); err != nil || string(got) != "/opt/epochfs/examples/pytorch/torchrun.py --nnodes 2 train.py --data /d a\n" {
		t.Errorf("torchrun wrapper: %v, %q", err, got)
	}

	for _, script := range []string{"train.py", "torchrun.py"} {
		p := filepath.Join(examples, script)
		if err := os.Rename(p, p+".away"); err != nil {
			t.Fatal(err)
		}
		err = run([]string{"torch-example", "-rootfs", rootfsPath, "-examples", examples, "-ref", "epochfs/torch-example:v9", "-out", out})
		if err == nil || !strings.Contains(err.Error(), "lacks train.py or torchrun.py") {
			t.Errorf("examples without %s: %v, want refused", script, err)
		}
		if err := os.Rename(p+".away", p); err != nil {
			t.Fatal(err)
		}
	}
}
