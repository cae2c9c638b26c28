package main

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/creack/pty"

	"github.com/epochfs/epochfs/internal/testenv"
)

// TestProgressBarPty: on an 80-column terminal (a pty) the bar never draws
// a line wider than the terminal, even with a long detail, and shows the
// percent.
func TestProgressBarPty(t *testing.T) {
	t.Setenv("TERM", "xterm")
	ptm, pts, err := pty.Open()
	if err != nil {
		testenv.RequireOrSkip(t, "no pseudo-terminal ("+err.Error()+")", "the test needs /dev/ptmx")
	}
	defer ptm.Close()
	if err := pty.Setsize(ptm, &pty.Winsize{Rows: 24, Cols: 80}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	read := make(chan struct{})
	go func() { _, _ = io.Copy(&out, ptm); close(read) }() // ends with EIO once pts is closed

	var mu sync.Mutex
	polls := 0
	enough := make(chan struct{})
	poll := func() progressState {
		mu.Lock()
		defer mu.Unlock()
		polls++
		if polls == 12 {
			close(enough)
		}
		return progressState{Label: "prefetch", Done: int64(min(polls*10, 100)), Total: 100, ETA: 0,
			Detail: strings.Repeat("a long detail of counts, ", 8)}
	}
	if !isTerminal(pts) {
		t.Fatal("the pty is not a terminal to isTerminal")
	}
	stop := showProgress(pts, "auto", poll)
	<-enough
	stop()
	pts.Close()
	<-read

	ansi := regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`)
	text := ansi.ReplaceAllString(out.String(), "")
	lines, last := 0, ""
	for _, seg := range regexp.MustCompile(`\r\n|\r|\n`).Split(text, -1) {
		if n := utf8.RuneCountInString(seg); n > 80 {
			t.Errorf("a line of %d columns on an 80-column terminal: %q", n, seg)
		}
		if seg != "" {
			lines, last = lines+1, seg
		}
	}
	t.Logf("the last frame: %q", last)
	if lines == 0 || !strings.Contains(last, "prefetch 100%") || !strings.Contains(last, "[====") {
		t.Errorf("no bar with its percent drawn:\n%q", text)
	}
}

// TestProgressLines: without a terminal, a plain line at each 10 % step,
// one every 5 s (linesEvery looks) while the total is unknown, and the
// last state once at the end.
func TestProgressLines(t *testing.T) {
	var b bytes.Buffer
	l := &progressLines{w: &b}
	for range 2*linesEvery + 3 {
		l.tick(progressState{Label: "listing", ETA: -1, Detail: "counting"})
	}
	for p := range 101 {
		for range 3 { // several looks at each percent
			l.tick(progressState{Label: "prefetch", Done: int64(p), Total: 100, ETA: -1})
		}
	}
	l.final(progressState{Label: "prefetch", Done: 100, Total: 100, ETA: -1})
	want := "listing: | counting\nlisting: | counting\n"
	for p := 0; p <= 100; p += 10 {
		want += fmt.Sprintf("prefetch: %d%%\n", p)
	}
	if b.String() != want {
		t.Errorf("lines:\n%s\nwant:\n%s", b.String(), want)
	}
	// The end is written when it is not the last line.
	b.Reset()
	l = &progressLines{w: &b}
	l.tick(progressState{Label: "prefetch", Done: 5, Total: 100, ETA: 0})
	l.final(progressState{Label: "prefetch", Done: 55, Total: 100, ETA: 0})
	if b.String() != "prefetch: 5% ETA 0s\nprefetch: 55% ETA 0s\n" {
		t.Errorf("interrupted at 55%%:\n%s", b.String())
	}
	// Not a terminal: showProgress writes lines, never escapes.
	b.Reset()
	stop := showProgress(&b, "auto", func() progressState { return progressState{Label: "prefetch", Done: 100, Total: 100, ETA: -1} })
	stop()
	if b.String() != "prefetch: 100%\n" {
		t.Errorf("auto without a terminal: %q", b.String())
	}
}
