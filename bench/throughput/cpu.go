package main

import (
	"fmt"

	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// CPU accounting of a run: where the CPU time of the whole machine went
// while one reader ran, in CPU seconds per 1000 files. On a small VM whose
// cores are saturated, files/s is CPU per file; these columns say whose.

// clockTicks is USER_HZ, the unit of /proc/stat and /proc/PID/stat (100 on
// every Linux architecture Go supports).
const clockTicks = 100

// cpuSample is one reading of the counters.
type cpuSample struct {
	at          time.Time
	busy, steal float64            // machine, CPU seconds
	procs       map[string]float64 // named processes, CPU seconds
	self        float64            // this process (the readers, the GET loop)
	// Read requests completed and bytes read by the work directory's disk.
	diskReads, diskBytes float64
}

// workDisk is the major:minor of the work directory's block device (set
// by Bench), whose reads sampleCPU counts; 0:0 counts none.
var workDisk [2]uint32

// setWorkDisk finds the block device that holds dir.
func setWorkDisk(dir string) {
	var st unix.Stat_t
	if unix.Stat(dir, &st) == nil {
		workDisk = [2]uint32{unix.Major(st.Dev), unix.Minor(st.Dev)}
	}
}

// sampleCPU reads the machine's, this process's and pids' CPU times. A
// process that cannot be read (it exited) is left out.
func sampleCPU(pids map[string]int) cpuSample {
	s := cpuSample{at: time.Now(), procs: map[string]float64{}}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal …
		for i := 1; i < len(f) && i <= 8; i++ {
			v, _ := strconv.ParseFloat(f[i], 64)
			switch i {
			case 4, 5: // idle, iowait
			case 8:
				s.steal += v / clockTicks
			default:
				s.busy += v / clockTicks
			}
		}
	}
	if workDisk != [2]uint32{} {
		if b, err := os.ReadFile("/proc/diskstats"); err == nil {
			for _, l := range strings.Split(string(b), "\n") {
				f := strings.Fields(l) // major minor name reads merged sectors …
				if len(f) < 6 || f[0] != strconv.Itoa(int(workDisk[0])) || f[1] != strconv.Itoa(int(workDisk[1])) {
					continue
				}
				s.diskReads, _ = strconv.ParseFloat(f[3], 64)
				sectors, _ := strconv.ParseFloat(f[5], 64)
				s.diskBytes = sectors * 512
			}
		}
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.self = tv(ru.Utime) + tv(ru.Stime)
	}
	for name, pid := range pids {
		if v, ok := procCPU(pid); ok {
			s.procs[name] = v
		}
	}
	return s
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// procCPU is utime+stime of pid in seconds.
func procCPU(pid int) (float64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The command name may hold spaces: fields start after the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 { // f[0] is field 3 (state); utime is field 14, stime 15
		return 0, false
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return (ut + st) / clockTicks, true
}

// cpuUse is the CPU time spent between two samples, per 1000 files.
type cpuUse struct {
	Wall    float64            // seconds of the run
	Machine float64            // all cores, every process and the kernel
	Steal   float64            // taken by the hypervisor
	Procs   map[string]float64 // named processes (minio, mount, prefetch)
	Self    float64            // the readers or the GET loop
	Busy    float64            // share of the machine's cores busy during the run
	// DiskReads and DiskMB: read requests and MB read from the work
	// directory's disk.
	DiskReads, DiskMB float64
}

// since is the use from s0 to s1 over files files; extra adds CPU seconds
// of processes that ran and exited in between (e.g. `cachefs prefetch`).
func since(s0, s1 cpuSample, files int, extra map[string]float64) cpuUse {
	k := 1000 / float64(max(files, 1))
	u := cpuUse{
		Wall:      s1.at.Sub(s0.at).Seconds(),
		Machine:   (s1.busy - s0.busy) * k,
		Steal:     (s1.steal - s0.steal) * k,
		Self:      (s1.self - s0.self) * k,
		Procs:     map[string]float64{},
		DiskReads: (s1.diskReads - s0.diskReads) * k,
		DiskMB:    (s1.diskBytes - s0.diskBytes) / 1e6 * k,
	}
	if cores := float64(numCPU()); u.Wall > 0 && cores > 0 {
		u.Busy = (s1.busy - s0.busy) / (u.Wall * cores)
	}
	for name, v := range s1.procs {
		if v0, ok := s0.procs[name]; ok {
			u.Procs[name] = (v - v0) * k
		}
	}
	for name, v := range extra {
		u.Procs[name] += v * k
	}
	return u
}

// String is one log line: machine total, then each part.
func (u cpuUse) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "CPU s per 1000 files: machine %.2f (readers/loop %.2f", u.Machine, u.Self)
	names := make([]string, 0, len(u.Procs))
	for n := range u.Procs {
		names = append(names, n)
	}
	slices.Sort(names)
	rest := u.Machine - u.Self
	for _, n := range names {
		fmt.Fprintf(&b, ", %s %.2f", n, u.Procs[n])
		rest -= u.Procs[n]
	}
	fmt.Fprintf(&b, ", other incl. kernel threads %.2f), steal %.2f, cores busy %.0f%%; disk reads per 1000 files %.0f, %.0f MB",
		rest, u.Steal, 100*u.Busy, u.DiskReads, u.DiskMB)
	return b.String()
}

func numCPU() int {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "cpu") && len(l) > 3 && l[3] >= '0' && l[3] <= '9' {
			n++
		}
	}
	return n
}

// cpuTable renders the medians over rounds of every reader's CPU use.
func (rep *Report) cpuTable(b *strings.Builder) {
	order := []string{native, epochfs, epochfsMan, rcloneR, mountCol, mountNone, mountOff, mountRA, mountMan, getLoop, prefetch, prefetchMan}
	parts := []string{"mount", "rclone", "prefetch", "minio"}
	b.WriteString("\n### Where the CPU went: CPU seconds (and disk reads) per 1000 files, medians over the rounds\n\n")
	b.WriteString("\"readers\" is the benchmark process (the 8 readers with their sha256, or the GET loop); \"other\" is the " +
		"rest of the machine (kernel threads such as writeback, other processes); \"cores busy\" is the machine's busy share.\n\n")
	b.WriteString("| run | machine | readers |")
	for _, p := range parts {
		fmt.Fprintf(b, " %s |", p)
	}
	b.WriteString(" other | steal | cores busy | disk reads | disk MB |\n|---|" + strings.Repeat("---|", len(parts)+7) + "\n")
	for _, name := range order {
		us := rep.CPU[name]
		if len(us) == 0 {
			continue
		}
		col := func(f func(cpuUse) float64) float64 {
			v := make([]float64, len(us))
			for i, u := range us {
				v[i] = f(u)
			}
			return median(v)
		}
		fmt.Fprintf(b, "| %s | %.2f | %.2f |", name, col(func(u cpuUse) float64 { return u.Machine }), col(func(u cpuUse) float64 { return u.Self }))
		for _, p := range parts {
			if _, ok := us[0].Procs[p]; !ok {
				b.WriteString(" |")
				continue
			}
			fmt.Fprintf(b, " %.2f |", col(func(u cpuUse) float64 { return u.Procs[p] }))
		}
		other := col(func(u cpuUse) float64 {
			r := u.Machine - u.Self
			for _, v := range u.Procs {
				r -= v
			}
			return r
		})
		fmt.Fprintf(b, " %.2f | %.2f | %.0f%% | %.0f | %.0f |\n", other, col(func(u cpuUse) float64 { return u.Steal }), 100*col(func(u cpuUse) float64 { return u.Busy }),
			col(func(u cpuUse) float64 { return u.DiskReads }), col(func(u cpuUse) float64 { return u.DiskMB }))
	}
}
