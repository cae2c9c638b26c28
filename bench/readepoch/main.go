// Command readepoch reads every file under one or more directories once, in
// a seeded shuffled order with N parallel readers (like a data loader's
// workers), and prints files/s per directory. With several directories and
// -rounds > 1 the runs are interleaved (A B A B …), because single runs on a
// shared VM vary a lot. As root it drops the page cache before each run.
//
//	go run ./bench/readepoch -workers 8 -rounds 3 /data/ds /mnt/ds
package main

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/epochfs/epochfs/internal/epoch"
)

func main() {
	workers := flag.Int("workers", 8, "parallel readers")
	rounds := flag.Int("rounds", 3, "interleaved rounds over the directories")
	seed := flag.Uint64("seed", 1, "shuffle seed (round r uses seed+r)")
	drop := flag.Bool("drop-caches", true, "drop the kernel page cache before each run (root only)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: readepoch [flags] DIR [DIR...]")
		os.Exit(2)
	}
	paths, err := list(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "readepoch:", err)
		os.Exit(1)
	}
	for r := range *rounds {
		for _, dir := range flag.Args() {
			if *drop {
				if err := epoch.DropPageCache(); err != nil {
					fmt.Fprintln(os.Stderr, "readepoch: cannot drop the page cache:", err)
				}
			}
			res, err := epoch.Run(context.Background(), epoch.Options{Root: dir, Paths: paths, Workers: *workers, Seed: *seed + uint64(r)})
			if err != nil {
				fmt.Fprintln(os.Stderr, "readepoch:", err)
				os.Exit(1)
			}
			fmt.Printf("round %d  %-50s %6d files %8.0f files/s %8.1f MB/s\n", r+1, dir, res.Files, res.FilesPerSec(),
				float64(res.Bytes)/1e6/res.Elapsed.Seconds())
		}
	}
}

// list returns the regular files under root, relative and sorted.
func list(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}
