package main

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
)

// Markdown renders the report's tables with per-round ratios and medians.
func (rep *Report) Markdown(header string) string {
	var b strings.Builder
	b.WriteString(header)
	if len(rep.P2) > 0 {
		b.WriteString("\n### P2: cached epoch (epoch ≥ 2, everything cached), files/s\n\n")
		cols := present(rep.P2, native, epochfs, epochfsMan, rcloneR)
		table(&b, rep.P2, cols, [][2]string{{epochfs, native}, {epochfsMan, native}, {epochfs, rcloneR}})
		fmt.Fprintf(&b, "\nDuring the cached EpochFS epochs: %d opens reached the daemon, %d READ requests on cached files "+
			"(0 = FUSE passthrough engaged: the kernel reads the cache files directly), %d other READ requests.\n",
			rep.CachedOpens, rep.CachedReads, rep.OtherReads)
	}
	if len(rep.P3) > 0 {
		if rep.S3Latency > 0 {
			fmt.Fprintf(&b, "\n### P3: cold epoch from MinIO on 127.0.0.1 behind a proxy adding %v to every request, files/s\n\n", rep.S3Latency)
		} else {
			b.WriteString("\n### P3: cold epoch from MinIO on 127.0.0.1, files/s\n\n")
		}
		cols := present(rep.P3, mountCol, mountNone, mountOff, mountRA, mountMan, getLoop, prefetch, prefetchMan)
		table(&b, rep.P3, cols, [][2]string{{mountCol, getLoop}, {mountNone, getLoop}, {mountOff, getLoop}, {mountRA, getLoop}, {mountMan, getLoop},
			{prefetch, getLoop}, {prefetchMan, getLoop}, {mountCol, mountOff}})
		b.WriteString("\n\"mount cold\" has the default flags (`--readahead-files auto`); \"readahead off\" is `--readahead-files 0` " +
			"(the default before auto); \"readahead\" pins the window (`--readahead-files N`).\n")
		if len(rep.ReadAhead) > 0 {
			b.WriteString("\nFiles read ahead per round (the mount's fusefs FilesReadAhead, as cachefs_readahead_files_total): ")
			for i, s := range rep.ReadAhead {
				if i > 0 {
					b.WriteString("; ")
				}
				b.WriteString(s)
			}
			b.WriteString("\n")
		}
	}
	if len(rep.CPU) > 0 {
		rep.cpuTable(&b)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "\nNote: %s\n", n)
	}
	return b.String()
}

func present(rows []map[string]float64, names ...string) []string {
	var out []string
	for _, n := range names {
		if _, ok := rows[0][n]; ok {
			out = append(out, n)
		}
	}
	return out
}

func table(b *strings.Builder, rows []map[string]float64, cols []string, ratios [][2]string) {
	var rs [][2]string
	for _, r := range ratios {
		if slices.Contains(cols, r[0]) && slices.Contains(cols, r[1]) {
			rs = append(rs, r)
		}
	}
	b.WriteString("| round |")
	for _, c := range cols {
		fmt.Fprintf(b, " %s |", c)
	}
	for _, r := range rs {
		fmt.Fprintf(b, " %s / %s |", r[0], r[1])
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(cols)+len(rs)) + "\n")
	ratioVals := make([][]float64, len(rs))
	for i, row := range rows {
		fmt.Fprintf(b, "| %d |", i+1)
		for _, c := range cols {
			fmt.Fprintf(b, " %.0f |", row[c])
		}
		for j, r := range rs {
			v := row[r[0]] / row[r[1]]
			ratioVals[j] = append(ratioVals[j], v)
			fmt.Fprintf(b, " %.2f |", v)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(b, "| median |%s", strings.Repeat(" |", len(cols)))
	for j := range rs {
		fmt.Fprintf(b, " **%.2f** |", median(ratioVals[j]))
	}
	b.WriteString("\n")
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// machine describes this host for the report header.
func machine() string {
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		mem = strings.Join(strings.Fields(line)[1:], " ")
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return fmt.Sprintf("nproc %d, MemTotal %s, kernel %s", runtime.NumCPU(), mem, strings.TrimSpace(string(kernel)))
}
