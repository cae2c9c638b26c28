package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/epochfs/epochfs/pkg/backend/cephfs"
)

// version is set at build time: -ldflags "-X main.version=v0.1.0".
var version = "dev"

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of cachefs and of its main dependencies",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, args []string) {
			fmt.Printf("cachefs %s (%s, %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			ceph := "cephfs (libcephfs)"
			if !cephfs.Built {
				ceph = "no cephfs: make build-ceph"
			}
			fmt.Printf("  sources: posix, s3, nfs, mirror, %s\n", ceph)
			if bi, ok := debug.ReadBuildInfo(); ok {
				for _, d := range bi.Deps {
					switch d.Path {
					case "github.com/hanwen/go-fuse/v2", "github.com/minio/minio-go/v7", "github.com/ceph/go-ceph":
						fmt.Printf("  %s %s\n", d.Path, d.Version)
					}
				}
			}
		},
	}
}
