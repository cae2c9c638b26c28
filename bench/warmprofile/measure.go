package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat.
const clockTicks = 100

// procCPU is a process's CPU time so far: utime+stime from /proc/PID/stat
// (10 ms units, dead threads included) and the sum of its live threads'
// run time from /proc/PID/task/*/schedstat (nanoseconds; Go keeps its
// threads, so this is the precise figure of the two).
type procCPU struct {
	ticks time.Duration
	sched time.Duration
}

func readProcCPU(pid int) (procCPU, error) {
	var c procCPU
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return c, err
	}
	// Fields after the ")" closing the command name: state is field 3,
	// utime field 14, stime 15.
	rest := string(b[bytes.LastIndexByte(b, ')')+2:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		return c, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	c.ticks = time.Duration(ut+st) * time.Second / clockTicks
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil {
		return c, err
	}
	for _, t := range tasks {
		if b, err := os.ReadFile(t); err == nil {
			ns, _ := strconv.ParseInt(strings.Fields(string(b))[0], 10, 64)
			c.sched += time.Duration(ns)
		}
	}
	return c, nil
}

// readerResult is what pilread.py prints.
type readerResult struct {
	Files   int     `json:"files"`
	Seconds float64 `json:"seconds"`
	Pixels  int64   `json:"pixels"`
	First   int64   `json:"first"`
	InBytes int64   `json:"-"` // the reader's block input (getrusage ru_inblock)
}

// runReader runs the PIL reader over root (opening files with an explicit
// buffer size when buffered) and returns its result and the CPU time it and
// its workers used (user, system).
func runReader(python, script, root, list string, workers int, seed uint64, buffered bool) (readerResult, time.Duration, time.Duration, error) {
	res := readerResult{}
	var before, after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &before)
	args := []string{script, root, list, strconv.Itoa(workers), strconv.FormatUint(seed, 10)}
	if buffered {
		args = append(args, "buffered")
	}
	cmd := exec.Command(python, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return res, 0, 0, fmt.Errorf("reader over %s: %w: %s", root, err, stderr.String())
	}
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &after)
	if err := json.Unmarshal(bytes.TrimSpace(out), &res); err != nil {
		return res, 0, 0, fmt.Errorf("reader over %s: %w: %q", root, err, out)
	}
	res.InBytes = (after.Inblock - before.Inblock) * 512
	user := tvDur(after.Utime) - tvDur(before.Utime)
	sys := tvDur(after.Stime) - tvDur(before.Stime)
	return res, user, sys, nil
}

func tvDur(t syscall.Timeval) time.Duration {
	return time.Duration(t.Sec)*time.Second + time.Duration(t.Usec)*time.Microsecond
}

// dropCaches syncs and drops the kernel's caches: mode 3 is the page cache
// and the dentries and inodes (what the benchmarks do before each measured
// epoch: it makes the kernel FORGET every FUSE inode, so the next epoch
// looks each file up again); mode 1 is the page cache only, so the dentries
// stay (what a training job's second epoch sees).
func dropCaches(mode int) error {
	syscall.Sync()
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte(strconv.Itoa(mode)), 0)
}

// loadavg is /proc/loadavg's first three fields.
func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// rxLine matches go-fuse's debug line of a request: "rx 12: LOOKUP n1 …",
// and a batch forget's entries, "doBatchForget: rx 12 1/3: FORGET n5 …".
var rxLine = regexp.MustCompile(`rx \d+(?: \d+/\d+)?: ([A-Z_]+)`)

// countOpcodes counts the requests logged in path after offset by opcode.
func countOpcodes(path string, offset int64) (map[string]int, int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, err
	}
	counts := map[string]int{}
	if offset > int64(len(b)) {
		offset = int64(len(b))
	}
	for _, m := range rxLine.FindAllSubmatch(b[offset:], -1) {
		counts[string(m[1])]++
	}
	return counts, int64(len(b)), nil
}

// fileSize is the size of path now (0 if absent).
func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// diskReads is the bytes read from the block device that holds dir so far
// (/proc/diskstats, sectors of 512 bytes), or 0 when it cannot be read.
func diskReads(dir string) int64 {
	var st syscall.Stat_t
	if syscall.Stat(dir, &st) != nil {
		return 0
	}
	major, minor := int64(st.Dev>>8&0xfff), int64(st.Dev&0xff|st.Dev>>12&0xfff00)
	b, err := os.ReadFile("/proc/diskstats")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l) // major minor name reads merged sectors …
		if len(f) < 6 || f[0] != strconv.FormatInt(major, 10) || f[1] != strconv.FormatInt(minor, 10) {
			continue
		}
		sectors, _ := strconv.ParseInt(f[5], 10, 64)
		return sectors * 512
	}
	return 0
}
