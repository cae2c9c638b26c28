// Command gen writes a deterministic ImageNet-like dataset (internal/datagen:
// class directories, log-normal sizes clamped to 16 KB–5 MB around a
// ~110 KB median) to a local directory or to an S3 bucket prefix, and prints
// a summary. The same flags always produce the same names and bytes.
//
//	go run ./bench/gen --files 2000 --bytes 300MB --seed 1 --out /var/tmp/ds
//	AWS_ACCESS_KEY_ID=… AWS_SECRET_ACCESS_KEY=… go run ./bench/gen --files 2000 \
//	    --s3 's3://datasets/imagenet?endpoint=http://127.0.0.1:9000'
//
// --bytes scales the median so that the total is as close as the clamps
// allow. S3 credentials come from the environment, the shared credentials
// file or IAM (like cachefs); a missing bucket is created; uploads run with
// --workers in parallel.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/pkg/source"
	"github.com/epochfs/epochfs/pkg/units"
)

// Config of one generation. Exactly one of Out and S3 is set.
type Config struct {
	Spec    datagen.Spec
	Out     string // local directory
	S3      string // s3://bucket/prefix?endpoint=…&region=…
	Workers int    // parallel writes or uploads
}

func main() {
	var (
		c     Config
		bytes string
	)
	flag.IntVar(&c.Spec.Files, "files", 2000, "number of files")
	flag.StringVar(&bytes, "bytes", "", "target total size (e.g. 300MB, 1GiB); default: whatever the default median gives")
	flag.Uint64Var(&c.Spec.Seed, "seed", 1, "random seed: the same seed gives the same dataset")
	flag.IntVar(&c.Spec.Classes, "classes", 20, "class directories")
	flag.StringVar(&c.Out, "out", "", "write to this local directory")
	flag.StringVar(&c.S3, "s3", "", "upload to this S3 URL: s3://bucket/prefix?endpoint=http://host:9000&region=us-east-1")
	flag.IntVar(&c.Workers, "workers", 16, "parallel writes or uploads")
	flag.Parse()
	if bytes != "" {
		n, err := units.ParseSize(bytes)
		if err != nil {
			fmt.Fprintln(os.Stderr, "gen: --bytes:", err)
			os.Exit(2)
		}
		c.Spec.TotalBytes = n
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c Config, stdout io.Writer) error {
	switch {
	case (c.Out == "") == (c.S3 == ""):
		return errors.New("give exactly one of --out DIR and --s3 URL")
	case c.Workers < 1:
		return fmt.Errorf("--workers %d: want at least 1", c.Workers)
	}
	if err := c.Spec.Validate(); err != nil {
		return err
	}
	files := c.Spec.Plan()
	start := time.Now()
	var where string
	var put func(context.Context, datagen.File) error
	if c.Out != "" {
		where = c.Out
		put = func(ctx context.Context, f datagen.File) error { return writeLocal(c.Out, f) }
	} else {
		client, bucket, prefix, err := s3Client(ctx, c.S3)
		if err != nil {
			return err
		}
		where = "s3://" + bucket + "/" + prefix
		put = func(ctx context.Context, f datagen.File) error {
			key := f.Path
			if prefix != "" {
				key = prefix + "/" + f.Path
			}
			_, err := client.PutObject(ctx, bucket, key, datagen.Reader(f.Seed, f.Size), f.Size,
				minio.PutObjectOptions{ContentType: "image/jpeg", DisableMultipart: f.Size < 64<<20})
			if err != nil {
				return fmt.Errorf("put %s/%s: %w", bucket, key, err)
			}
			return nil
		}
	}
	if err := parallel(ctx, files, c.Workers, put); err != nil {
		return err
	}
	el := time.Since(start)
	total := datagen.TotalSize(files)
	fmt.Fprintf(stdout, "generated %d files, %s (%d bytes) in %d classes to %s: seed %d, median %s, sizes %s..%s, in %s (%.0f files/s, %s/s)\n",
		len(files), units.FormatSize(total), total, c.Spec.Classes, where, c.Spec.Seed, units.FormatSize(c.Spec.Median()),
		units.FormatSize(minSize(files)), units.FormatSize(maxSize(files)), el.Round(time.Millisecond),
		float64(len(files))/el.Seconds(), units.FormatSize(int64(float64(total)/el.Seconds())))
	return nil
}

// parallel runs put for every file with workers goroutines; the first
// error stops the rest.
func parallel(ctx context.Context, files []datagen.File, workers int, put func(context.Context, datagen.File) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(len(files)) {
					return
				}
				if err := put(ctx, files[i]); err != nil {
					cancel(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return context.Cause(ctx)
}

func writeLocal(dir string, f datagen.File) error {
	p := filepath.Join(dir, filepath.FromSlash(f.Path))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	out, err := os.Create(p)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, datagen.Reader(f.Seed, f.Size)); err != nil {
		out.Close()
		return fmt.Errorf("write %s: %w", p, err)
	}
	return out.Close()
}

// s3Client parses an s3:// source URL (pkg/source's parser) and returns a
// client with the standard credential chain, creating the bucket if it is
// missing.
func s3Client(ctx context.Context, raw string) (*minio.Client, string, string, error) {
	src, err := source.Parse(raw)
	if err != nil {
		return nil, "", "", err
	}
	if src.Kind != source.KindS3 {
		return nil, "", "", fmt.Errorf("--s3 %q: want an s3:// URL", raw)
	}
	host, secure := "s3.amazonaws.com", true
	if src.Endpoint != "" {
		scheme, h, _ := strings.Cut(src.Endpoint, "://")
		host, secure = h, scheme == "https"
	}
	lookup := minio.BucketLookupAuto
	if src.PathStyle {
		lookup = minio.BucketLookupPath
	}
	client, err := minio.New(host, &minio.Options{
		Creds: credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{}, &credentials.FileAWSCredentials{}, &credentials.IAM{},
		}),
		Secure:       secure,
		Region:       src.Region,
		BucketLookup: lookup,
	})
	if err != nil {
		return nil, "", "", fmt.Errorf("s3 client: %w", err)
	}
	ok, err := client.BucketExists(ctx, src.Bucket)
	if err != nil {
		return nil, "", "", fmt.Errorf("bucket %s: %w", src.Bucket, err)
	}
	if !ok {
		if err := client.MakeBucket(ctx, src.Bucket, minio.MakeBucketOptions{Region: src.Region}); err != nil {
			return nil, "", "", fmt.Errorf("create bucket %s: %w", src.Bucket, err)
		}
	}
	return client, src.Bucket, src.Prefix, nil
}

func minSize(files []datagen.File) int64 {
	var m int64
	for i, f := range files {
		if i == 0 || f.Size < m {
			m = f.Size
		}
	}
	return m
}

func maxSize(files []datagen.File) int64 {
	var m int64
	for _, f := range files {
		m = max(m, f.Size)
	}
	return m
}
