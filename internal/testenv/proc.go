package testenv

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Proc is a child process a helper started (a server, a mount), stopped
// by its own PID only. Done is closed when it has exited; Err is then its
// Wait result. Exported fields are read-only.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	// Out holds its stdout and stderr when StartProc was given a buffer
	// (else the caller directed them, e.g. to LogPath).
	Out *SyncBuffer
	// LogPath, when set, is the file its output goes to (Tail reads it).
	LogPath string
	Done    chan struct{}

	err error // Wait's result; read only after Done
}

// StartProc starts cmd; out, when not nil, receives the stdout and stderr
// the caller did not set.
func StartProc(name string, cmd *exec.Cmd, out *SyncBuffer) (*Proc, error) {
	p := &Proc{Name: name, Cmd: cmd, Out: out, Done: make(chan struct{})}
	if out != nil {
		if cmd.Stdout == nil {
			cmd.Stdout = out
		}
		if cmd.Stderr == nil {
			cmd.Stderr = out
		}
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	go func() { p.err = cmd.Wait(); close(p.Done) }()
	return p, nil
}

// Err is the process's exit (Wait's result), once Done is closed.
func (p *Proc) Err() error {
	<-p.Done
	return p.err
}

// Kill sends SIGKILL to the process (by PID: only the one we started) and
// waits until it has exited.
func (p *Proc) Kill() {
	_ = p.Cmd.Process.Kill()
	<-p.Done
}

// Terminate sends SIGTERM to the process (a clean shutdown: a mount
// unmounts), waits up to grace for it to exit, then kills it (Kill).
func (p *Proc) Terminate(grace time.Duration) {
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.Done:
	case <-time.After(grace):
		p.Kill()
	}
}

// Tail returns the last n bytes of the process's output (Out, else the
// file LogPath).
func (p *Proc) Tail(n int) string {
	var s string
	if p.Out != nil {
		s = p.Out.String()
	} else if p.LogPath != "" {
		b, _ := os.ReadFile(p.LogPath)
		s = string(b)
	}
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}

// WaitHTTP polls url every 50 ms until it answers 200 OK; it returns an
// error when the process exits first or timeout passes.
func (p *Proc) WaitHTTP(client *http.Client, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		select {
		case <-p.Done:
			return fmt.Errorf("%s exited before ready (%v): %s", p.Name, p.err, p.Tail(4000))
		case <-time.After(50 * time.Millisecond):
		}
		resp, err := client.Get(url)
		if err != nil {
			last = err.Error()
			continue
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
		last = fmt.Sprintf("%s: %s", resp.Status, body)
	}
	return fmt.Errorf("%s not ready after %v (%s): %s", p.Name, timeout, last, p.Tail(4000))
}

// RandHex returns n random bytes in hex (credentials, tokens).
func RandHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers (a child's two
// pipes, a logger shared by goroutines) and readers. The zero value is
// ready and keeps everything written.
type SyncBuffer struct {
	// Max > 0 keeps only a process's tail: once the buffer holds more than
	// Max bytes, the next write starts it afresh.
	Max int

	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.Max > 0 && b.buf.Len() > b.Max {
		b.buf.Reset()
	}
	return b.buf.Write(p)
}

// String returns what the buffer holds.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
