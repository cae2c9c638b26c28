package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/epochfs/epochfs/internal/benchproc"
	"github.com/epochfs/epochfs/pkg/fusefs"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// startEpochFS runs a mount child of this binary (see child.go) with opts
// and waits until it is mounted.
func startEpochFS(opts mountapi.CommandOptions, env []string) (*benchproc.Proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Mountpoint, 0o755); err != nil {
		return nil, err
	}
	b, err := json.Marshal(opts)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(append(os.Environ(), childEnv+"="+string(b)), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p, err := benchproc.Start("epochfs mount", cmd, opts.Mountpoint)
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
