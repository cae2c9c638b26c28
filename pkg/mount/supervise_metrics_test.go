package mount_test

import (
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// TestSuperviseTakeoverThenRecoveries: a supervised mount is taken over by
// another `cachefs mount --supervise --takeover` (its supervisor exits 0
// once its mount process has handed over; the new supervisor holds the
// connection only once its own process answers), whose mount process is
// then killed twice with SIGKILL, while readers verify every byte. The
// last process's /metrics counts the connection's history across the four
// processes: 1 handover, 2 recoveries, stall histograms of 1 takeover and
// 2 recoveries.
func TestSuperviseTakeoverThenRecoveries(t *testing.T) {
	testenv.RequireFUSE(t)
	bin := buildVersion(t, t.TempDir(), "sup")
	src, files := testenv.WriteDataset(t, datagen.Spec{Files: 30, Classes: 2, MedianSize: 200 << 10, MaxSize: 2 << 20, Seed: 45})
	opts := supervisedOpts(t, bin, src, 1<<30)
	opts.MetricsAddr = "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	old := testenv.StartCachefs(t, bin, opts)
	waitHeld(t, opts.CacheDir, old.Proc)
	oldChild := childPid(t, old.Proc)
	rd := startReaders(t, opts.Mountpoint, files, 2, files[0])
	rd.waitRounds(1)

	next := opts
	next.Takeover = mountapi.HandoverSocket(opts.CacheDir)
	sup := testenv.StartCachefs(t, bin, next)
	waitLog(t, sup.Proc, "supervise: holding the connection")
	if err := old.Err(); err != nil {
		t.Fatalf("the old supervisor after its mount handed over: %v, want exit 0:\n%s", err, old.Tail(8000))
	}
	if m := regexp.MustCompile(`msg="supervise: holding the connection[^"]*" pid=(\d+)`).FindStringSubmatch(sup.Tail(1 << 20)); m == nil || m[1] == strconv.Itoa(oldChild) {
		t.Fatalf("the new supervisor holds from %v, the old mount process was %d:\n%s", m, oldChild, sup.Tail(8000))
	}
	rd.waitRounds(1)
	for i := range 2 {
		if err := syscall.Kill(childPid(t, sup.Proc), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitCount(t, sup.Proc, `msg="supervise: recovered"`, i+1)
		rd.waitRounds(1)
	}
	rd.stop()
	var stalls []string
	for _, p := range []*testenv.Proc{old.Proc, sup.Proc} {
		for _, m := range regexp.MustCompile(`msg="serving the taken-over connection" stall=(\S+) kind=(\S+)`).FindAllStringSubmatch(p.Tail(1<<22), -1) {
			stalls = append(stalls, m[2]+" "+m[1])
		}
	}
	t.Logf("%d files verified over %d rounds across 1 takeover and 2 kill -9; stalls: %s", rd.files.Load(), rd.rounds.Load(), strings.Join(stalls, ", "))
	if n := rd.errs.Load(); n != 0 {
		t.Fatalf("%d reader errors; first: %v\n%s", n, rd.firstErr, sup.Tail(8000))
	}
	got := samples(scrape(t, opts.MetricsAddr))
	for name, want := range map[string]float64{
		"cachefs_connection_handovers_total":                                 1,
		"cachefs_connection_recoveries_total":                                2,
		`cachefs_connection_stall_seconds_count{kind="takeover"}`:            1,
		`cachefs_connection_stall_seconds_count{kind="recovery"}`:            2,
		`cachefs_connection_stall_seconds_bucket{kind="takeover",le="+Inf"}`: 1,
		`cachefs_connection_stall_seconds_bucket{kind="recovery",le="+Inf"}`: 2,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
}

// samples are the values of a /metrics page by series.
func samples(text string) map[string]float64 {
	out := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		i := strings.LastIndexByte(line, ' ')
		if i < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}
