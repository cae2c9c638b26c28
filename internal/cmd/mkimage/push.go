package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/epochfs/epochfs/internal/imagebuild"
)

// insecureEnv, when "true" or "1", is -insecure's default (`make
// image-push INSECURE=1` sets the flag).
const insecureEnv = "EPOCHFS_REGISTRY_INSECURE"

// push pushes the image of each Docker-archive tar (`make images`) to
// REGISTRY/NAME:TAG, NAME and TAG from the archive (TAG from -tag when
// set), and prints one line per image. Credentials come from the docker
// config (authn.DefaultKeychain) and are never printed; plain HTTP only to
// localhost and loopback addresses unless -insecure.
func push(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("mkimage push", flag.ContinueOnError)
	registry := fs.String("registry", "", "registry host[:port][/path] to push to (required)")
	tag := fs.String("tag", "", "tag to push as; empty: the archive's (`make image-push` passes the chart's appVersion)")
	insecureDefault, _ := strconv.ParseBool(os.Getenv(insecureEnv))
	insecure := fs.Bool("insecure", insecureDefault, "allow plain HTTP to a registry not on loopback (default $"+insecureEnv+")")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *registry == "" || fs.NArg() == 0 {
		return errors.New("push: -registry HOST[:PORT][/PATH] and at least one FILE.tar are required (mkimage push -registry R [-tag TAG] [-insecure] FILE.tar ...)")
	}
	for _, path := range fs.Args() {
		ref, err := imagebuild.ArchiveRef(path)
		if err != nil {
			return fmt.Errorf("push: %w", err)
		}
		dst, err := imagebuild.RegistryRef(*registry, ref, *tag)
		if err != nil {
			return fmt.Errorf("push: %w", err)
		}
		start := time.Now()
		if err := imagebuild.Push(ctx, path, dst, imagebuild.PushOptions{Insecure: *insecure}); err != nil {
			return fmt.Errorf("push: %w", err)
		}
		fmt.Fprintf(stdout, "pushed %s as %s in %.1fs\n", path, dst, time.Since(start).Seconds())
	}
	return nil
}
