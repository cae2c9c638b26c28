package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/epochfs/epochfs/internal/benchproc"
	"github.com/epochfs/epochfs/pkg/fusefs"
)

// startEpochFS runs a mount child of this binary (see child.go) and waits
// until it is mounted. extra are more child flags (e.g. -readahead-files).
func startEpochFS(source, mnt, cacheDir string, capacity int64, env []string, extra ...string) (*benchproc.Proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return nil, err
	}
	args := append([]string{"-cache-dir", cacheDir, "-cache-size", strconv.FormatInt(capacity, 10)}, extra...)
	cmd := exec.Command(self, append(args, source, mnt)...)
	cmd.Env = append(append(os.Environ(), childEnv+"=1"), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p, err := benchproc.Start("epochfs mount", cmd, mnt)
	if err != nil {
		return nil, err
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "ready "); ok {
				ready <- addr
			}
		}
	}()
	select {
	case p.Debug = <-ready:
		return p, nil
	case <-p.Done:
		return nil, fmt.Errorf("epochfs mount exited before ready: %s", p.Out.String())
	case <-time.After(60 * time.Second):
		p.Stop()
		return nil, fmt.Errorf("epochfs mount not ready after 60s: %s", p.Out.String())
	}
}

// counters reads a mount child's fusefs counters.
func counters(p *benchproc.Proc) (fusefs.Counters, error) { return fetchCounters(p.Debug) }
