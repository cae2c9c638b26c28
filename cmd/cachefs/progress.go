package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/term"
)

// progressState is one look at a running index or prefetch.
type progressState struct {
	Label  string // the phase, short: "listing", "checking", "prefetch"
	Detail string // the counts, for people
	// Done of Total (bytes); Total 0: unknown, no percent and no bar.
	Done, Total int64
	ETA         time.Duration // < 0: unknown
}

// percent is 100×Done/Total, rounded down, or -1 when Total is unknown.
func (s progressState) percent() int {
	if s.Total <= 0 {
		return -1
	}
	return int(min(100*s.Done/s.Total, 100))
}

// line is the state as one plain line.
func (s progressState) line() string {
	var b strings.Builder
	b.WriteString(s.Label + ":")
	if p := s.percent(); p >= 0 {
		fmt.Fprintf(&b, " %d%%", p)
	}
	if s.ETA >= 0 && s.Total > 0 {
		b.WriteString(" ETA " + s.ETA.Round(time.Second).String())
	}
	if s.Detail != "" {
		b.WriteString(" | " + s.Detail)
	}
	return b.String()
}

// Progress display periods: a terminal's bar is redrawn every barPeriod;
// without a terminal the state is looked at as often, and a plain line is
// written at every 10 % step, or every linesEvery looks while the total is
// unknown (listing).
const (
	barPeriod  = 200 * time.Millisecond
	linesEvery = 25 // 5 s
	minBar     = 20 // columns the bar keeps on a narrow terminal
)

// showProgress shows poll() on w until the returned stop is called: mode
// "none" shows nothing; "auto" on a terminal draws a bar as wide as the
// terminal (mpb) with the percent and ETA; "lines", or "auto" elsewhere,
// writes plain lines (progressLines).
func showProgress(w io.Writer, mode string, poll func() progressState) (stop func()) {
	switch {
	case mode == "none":
		return func() {}
	case mode == "auto" && isTerminal(w):
		return showBar(w, poll)
	}
	l := &progressLines{w: w}
	return every(barPeriod, func() { l.tick(poll()) }, func() { l.final(poll()) })
}

// every calls tick every period until the returned stop is called, which
// calls final and returns after it.
func every(period time.Duration, tick, final func()) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-done:
				final()
				return
			case <-t.C:
				tick()
			}
		}
	}()
	return func() { close(done); <-finished }
}

// progressLines writes the plain lines of a progress display that is not
// on a terminal (a log, a pipe): one at each 10 % step of a known total,
// one every linesEvery looks while the total is unknown, and the last
// state when it ends, unless that line was just written.
type progressLines struct {
	w     io.Writer
	looks int    // looks since the last timed line
	step  int    // the last 10 % step written; -1: none yet
	last  string // the last line written
	init  bool
}

func (l *progressLines) tick(s progressState) {
	if !l.init {
		l.step, l.init = -1, true
	}
	if p := s.percent(); p >= 0 {
		if p/10 > l.step {
			l.step = p / 10
			l.write(s.line())
		}
		return
	}
	if l.looks++; l.looks >= linesEvery {
		l.looks = 0
		l.write(s.line())
	}
}

func (l *progressLines) final(s progressState) {
	if line := s.line(); line != l.last {
		l.write(line)
	}
}

func (l *progressLines) write(line string) {
	l.last = line
	fmt.Fprintln(l.w, line)
}

// showBar draws poll() as an mpb bar on the terminal w, redrawn every
// barPeriod: "LABEL PCT% [=====>   ] ETA 1m2s | DETAIL", as wide as the
// terminal (mpb truncates the detail first when it is narrow).
func showBar(w io.Writer, poll func() progressState) (stop func()) {
	p := mpb.New(mpb.WithOutput(w), mpb.WithRefreshRate(barPeriod))
	// The decorators run on mpb's render goroutine: they read the state
	// through cur.
	var cur atomic.Pointer[progressState]
	label := func(decor.Statistics) string {
		s := cur.Load()
		if pc := s.percent(); pc >= 0 {
			return fmt.Sprintf("%s %3d%%", s.Label, pc)
		}
		return s.Label
	}
	tail := func(st decor.Statistics) string {
		s, text := cur.Load(), ""
		if s.ETA >= 0 && s.Total > 0 {
			text = "ETA " + s.ETA.Round(time.Second).String() + " "
		}
		text += "| " + s.Detail
		// Leave the bar minBar columns (mpb would give the bar only what
		// the decorators leave).
		if room := st.AvailableWidth - minBar - 2; utf8.RuneCountInString(text) > room {
			text = string([]rune(text)[:max(room-1, 0)]) + "…"
		}
		return text
	}
	first := poll()
	cur.Store(&first)
	bar := p.New(max(first.Total, 1), mpb.BarStyle(),
		mpb.PrependDecorators(decor.Any(label)), mpb.AppendDecorators(decor.Any(tail)))
	update := func() {
		s := poll()
		cur.Store(&s)
		total := max(s.Total, 1)
		bar.SetTotal(total, false)
		bar.SetCurrent(min(s.Done, total))
	}
	return every(barPeriod, update, func() {
		update()
		bar.Abort(false) // keep the last state on the screen
		p.Wait()
	})
}

// isTerminal reports whether w is a terminal (and TERM is not dumb).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd())) && !strings.EqualFold(os.Getenv("TERM"), "dumb")
}
