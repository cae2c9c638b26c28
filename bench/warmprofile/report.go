package main

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"
)

// epochRun is one measured epoch of one source.
type epochRun struct {
	Round, Drop int
	Source      string
	Res         readerResult
	Mount       procCPU       // the mount process's CPU over the epoch (zero for local)
	User, Sys   time.Duration // the reader's CPU (all its workers)
	Load        string        // /proc/loadavg at the start
	DiskBytes   int64         // read from the work directory's disk over the epoch
}

func (r epochRun) imgs() float64 { return float64(r.Res.Files) / r.Res.Seconds }

// Report is a profile run's figures.
type Report struct {
	Cfg            Config
	Date, Machine  string
	Bytes          int64
	Runs           []epochRun
	MeasuredMisses float64                           // cache misses of the mount over the measured rounds (0: warm)
	Opcodes        map[string]map[int]map[string]int // source → drop mode → opcode → requests in one epoch
	Sources        []string                          // in the order of the first round
	Priming        []epochRun                        // each EpochFS mount's first epoch, which fills its cache (cold)
	first          *readerResult
}

// add records r, checking that it decoded the same images as the first run.
func (rep *Report) add(r epochRun) error {
	if rep.first == nil {
		rep.first = &r.Res
	} else if r.Res.Files != rep.first.Files || r.Res.Pixels != rep.first.Pixels || r.Res.First != rep.first.First {
		return fmt.Errorf("%s round %d decoded other images: %+v, first run %+v", r.Source, r.Round, r.Res, *rep.first)
	}
	rep.Runs = append(rep.Runs, r)
	return nil
}

func perFile(d time.Duration, files int) float64 {
	if files == 0 {
		return 0
	}
	return float64(d.Microseconds()) / float64(files)
}

func machine() string {
	var u [3]string
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		u[0] = strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("%d CPUs, kernel %s, %s", runtime.NumCPU(), u[0], runtime.Version())
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Markdown renders the report: rounds, per-source medians, requests.
func (rep *Report) Markdown() string {
	var b strings.Builder
	c := rep.Cfg
	fmt.Fprintf(&b, "### warmprofile, %s\n\n", rep.Date)
	fmt.Fprintf(&b, "`bench-warm-profile -files %d -rounds %d -workers %d -drops %s%s`; %s; %d JPEGs, %.1f MB; "+
		"cache misses of the mounts over the measured rounds: %.0f (warm).\n\n",
		c.Files, c.Rounds, c.Workers, joinInts(c.Drops), variantFlag(c.Variants), rep.Machine, c.Files, float64(rep.Bytes)/1e6, rep.MeasuredMisses)
	rep.roundsTable(&b)
	b.WriteString("\nMedians over the rounds, per image (µs): the mount process's CPU (its threads' schedstat run time; " +
		"utime+stime in brackets), the reader's user and system CPU (all workers), and their sum. On 2 cores the loader is " +
		"CPU-bound, so local's CPU per image over a source's is the images/s ratio the source can reach: " +
		"a figure the other load on the machine disturbs far less than wall time.\n\n")
	b.WriteString("| drop_caches | source | img/s | mount CPU | reader user | reader sys | CPU per image | CPU-bound ratio vs local |\n|---|---|---|---|---|---|---|---|\n")
	for _, drop := range c.Drops {
		var localCPU float64
		for _, src := range rep.Sources {
			var imgs, sched, ticks, user, sys, total []float64
			for _, r := range rep.Runs {
				if r.Drop == drop && r.Source == src {
					imgs = append(imgs, r.imgs())
					sched = append(sched, perFile(r.Mount.sched, r.Res.Files))
					ticks = append(ticks, perFile(r.Mount.ticks, r.Res.Files))
					user = append(user, perFile(r.User, r.Res.Files))
					sys = append(sys, perFile(r.Sys, r.Res.Files))
					total = append(total, perFile(r.User+r.Sys+r.Mount.sched, r.Res.Files))
				}
			}
			mount := "—"
			if !strings.HasPrefix(src, srcLocal) {
				mount = fmt.Sprintf("%.0f (%.0f)", median(sched), median(ticks))
			} else if src == srcLocal {
				localCPU = median(total)
			}
			fmt.Fprintf(&b, "| %d | %s | %.0f | %s | %.0f | %.0f | %.0f | %.2f |\n", drop, src, median(imgs), mount,
				median(user), median(sys), median(total), localCPU/median(total))
		}
	}
	if len(rep.Priming) > 0 {
		b.WriteString("\nThe priming epochs (a new cache filled from the local dataset: cold, drop_caches 3, one run each):\n\n" +
			"| mount | img/s (load) | mount CPU µs/image | reader user + sys µs/image |\n|---|---|---|---|\n")
		for _, r := range rep.Priming {
			fmt.Fprintf(&b, "| %s | %.0f (%s) | %.0f | %.0f |\n", r.Source, r.imgs(), r.Load,
				perFile(r.Mount.sched, r.Res.Files), perFile(r.User+r.Sys, r.Res.Files))
		}
	}
	rep.opcodeTable(&b)
	return b.String()
}

// roundsTable renders images/s per round, with each source's ratio to local
// in the same round and the load average at its start.
func (rep *Report) roundsTable(b *strings.Builder) {
	b.WriteString("| round | drop_caches |")
	for _, src := range rep.Sources {
		fmt.Fprintf(b, " %s img/s (load) |", src)
	}
	b.WriteString("\n|---|---|" + strings.Repeat("---|", len(rep.Sources)) + "\n")
	for _, drop := range rep.Cfg.Drops {
		for round := 1; round <= rep.Cfg.Rounds; round++ {
			row := map[string]epochRun{}
			for _, r := range rep.Runs {
				if r.Round == round && r.Drop == drop {
					row[r.Source] = r
				}
			}
			fmt.Fprintf(b, "| %d | %d |", round, drop)
			for _, src := range rep.Sources {
				r := row[src]
				if src == srcLocal {
					fmt.Fprintf(b, " %.0f (%s) |", r.imgs(), r.Load)
					continue
				}
				fmt.Fprintf(b, " %.0f = %.2f× (%s) |", r.imgs(), r.imgs()/row[srcLocal].imgs(), r.Load)
			}
			b.WriteString("\n")
		}
	}
}

func variantFlag(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return " -variants " + strings.Join(v, ",")
}

// opcodeTable renders the FUSE requests per file by opcode.
func (rep *Report) opcodeTable(b *strings.Builder) {
	if len(rep.Opcodes) == 0 {
		return
	}
	ops := map[string]bool{}
	for _, byDrop := range rep.Opcodes {
		for _, counts := range byDrop {
			for op := range counts {
				ops[op] = true
			}
		}
	}
	names := make([]string, 0, len(ops))
	for op := range ops {
		names = append(names, op)
	}
	sort.Strings(names)
	fmt.Fprintf(b, "\nFUSE requests per file in one warm epoch (go-fuse's request log; %d files):\n\n", rep.Cfg.Files)
	b.WriteString("| drop_caches | mount | " + strings.Join(names, " | ") + " | total |\n|---|---|" + strings.Repeat("---|", len(names)+1) + "\n")
	for _, drop := range rep.Cfg.Drops {
		for _, src := range []string{srcEpochFS, srcLoopback} {
			counts := rep.Opcodes[src][drop]
			total := 0
			fmt.Fprintf(b, "| %d | %s |", drop, src)
			for _, op := range names {
				fmt.Fprintf(b, " %.2f |", float64(counts[op])/float64(rep.Cfg.Files))
				total += counts[op]
			}
			fmt.Fprintf(b, " %.2f |\n", float64(total)/float64(rep.Cfg.Files))
		}
	}
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ",")
}
