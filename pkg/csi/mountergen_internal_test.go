package csi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMounterReadiness: /readyz answers 200 only when every live dataset
// mount recorded in the node's state is a child of the mounter; dead
// records and unreadable files do not count; /v1/info names the mounter.
func TestMounterReadiness(t *testing.T) {
	state := t.TempDir()
	dir := filepath.Join(state, "node", "datasets")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	record := func(name string, pid int) {
		t.Helper()
		ticks, _ := startTicks(pid)
		b, _ := json.Marshal(datasetMount{Key: name, PID: pid, StartTicks: ticks})
		if err := os.WriteFile(filepath.Join(dir, name+".json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	child := exec.Command("sleep", "600") // a child of this process, the "mounter"
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	mux := http.NewServeMux()
	generationHandlers(mux, MounterConfig{StateDir: state})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b [512]byte
		n, _ := resp.Body.Read(b[:])
		return resp.StatusCode, string(b[:n])
	}

	if code, body := get("/readyz"); code != http.StatusOK {
		t.Errorf("no dataset mounts: /readyz %d %q, want 200", code, body)
	}
	record("mine", child.Process.Pid)
	record("dead", 1<<22+7) // beyond pid_max's default: no such process
	if err := os.WriteFile(filepath.Join(dir, "broken.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, body := get("/readyz"); code != http.StatusOK {
		t.Errorf("only own children live: /readyz %d %q, want 200", code, body)
	}
	record("other", 1) // init: alive, nobody's child here
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || body != "1 dataset mounts are not this mounter's yet\n" {
		t.Errorf("a mount of another mounter: /readyz %d %q, want 503 naming 1", code, body)
	}
	_, body := get("/v1/info")
	var info mounterInfo
	if err := json.Unmarshal([]byte(body), &info); err != nil || info.PID != os.Getpid() || !processAlive(info.PID, info.StartTicks) {
		t.Errorf("/v1/info = %q (%v), want this process", body, err)
	}
}

// TestWatchExit: the watch calls back once the process exits, and not
// after stop.
func TestWatchExit(t *testing.T) {
	start := func() *exec.Cmd {
		c := exec.Command("sleep", "600")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b := start(), start()
	t.Cleanup(func() { _ = b.Process.Kill(); _ = b.Wait() })
	var mu sync.Mutex
	exited := map[int]bool{}
	done := make(chan int, 2)
	watchOf := func(c *exec.Cmd) func() {
		ticks, _ := startTicks(c.Process.Pid)
		stop, err := watchExit(c.Process.Pid, ticks, func() {
			mu.Lock()
			exited[c.Process.Pid] = true
			mu.Unlock()
			done <- c.Process.Pid
		})
		if err != nil {
			t.Fatal(err)
		}
		return stop
	}
	watchOf(a)
	stopB := watchOf(b)
	stopB()
	_ = a.Process.Kill()
	_ = a.Wait()
	if pid := <-done; pid != a.Process.Pid {
		t.Fatalf("callback for %d, want %d", pid, a.Process.Pid)
	}
	_ = b.Process.Kill()
	_ = b.Wait()
	// A watch of an exited process calls back at once; b's stopped one
	// never does: the callback for this third watch comes first.
	c := start()
	_ = c.Process.Kill()
	_ = c.Wait()
	stop, err := watchExit(c.Process.Pid, 0, func() { done <- c.Process.Pid })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if pid := <-done; pid != c.Process.Pid {
		t.Errorf("callback for %d, want %d (a stopped watch called back)", pid, c.Process.Pid)
	}
	mu.Lock()
	defer mu.Unlock()
	if exited[b.Process.Pid] {
		t.Error("a stopped watch called back")
	}
}

// TestWatchExitNoThreadPerWatch: 100 watches of live processes park
// goroutines on the poller, not OS threads (a blocking poll(2) per watch
// would add one thread each), and each still calls back at its exit.
func TestWatchExitNoThreadPerWatch(t *testing.T) {
	const n = 100
	threads := func() int {
		b, err := os.ReadFile("/proc/self/status")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Threads:"); ok {
				k, _ := strconv.Atoi(strings.TrimSpace(v))
				return k
			}
		}
		t.Fatal("no Threads: line")
		return 0
	}
	before := threads()
	cmds := make([]*exec.Cmd, n)
	done := make(chan int, n)
	for i := range cmds {
		c := exec.Command("sleep", "600")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = c
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
		ticks, _ := startTicks(c.Process.Pid)
		stop, err := watchExit(c.Process.Pid, ticks, func() { done <- c.Process.Pid })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
	}
	time.Sleep(200 * time.Millisecond) // every watch parked
	if during := threads(); during-before > n/4 {
		t.Fatalf("%d threads with %d watches, %d before: a thread per watch", during, n, before)
	}
	for _, c := range cmds {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	seen := map[int]bool{}
	for len(seen) < n {
		select {
		case pid := <-done:
			seen[pid] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d watches called back", len(seen), n)
		}
	}
}
