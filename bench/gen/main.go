// Command gen writes a deterministic ImageNet-like dataset (internal/datagen)
// to a local directory or to an S3 bucket prefix, and prints a summary. The
// same flags always produce the same names and bytes.
//
// --format bytes (the default) writes class directories of incompressible
// files whose sizes follow a log-normal clamped to 16 KB–5 MB around a
// ~110 KB median; --bytes scales the median so that the total is as close
// as the clamps allow. --format jpeg writes decodable JPEGs (image/jpeg,
// --quality) whose pixel dimensions follow a log-normal, so files span
// ~10 KB–1 MB around a ~100 KB median, each class with its own hue and
// stripes (learnable by a small CNN); their sizes follow from the pixels,
// so --bytes is refused with --format jpeg.
//
//	go run ./bench/gen --files 2000 --bytes 300MB --seed 1 --out /var/tmp/ds
//	go run ./bench/gen --format jpeg --files 2000 --classes 10 --out /var/tmp/jpegs
//	AWS_ACCESS_KEY_ID=… AWS_SECRET_ACCESS_KEY=… go run ./bench/gen --files 2000 \
//	    --s3 's3://datasets/imagenet?endpoint=http://127.0.0.1:9000'
//
// S3 credentials come from the environment, the shared credentials file or
// IAM (like cachefs); a missing bucket is created; writes and uploads run
// with --workers in parallel.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
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

// Formats of --format.
const (
	FormatBytes = "bytes" // datagen.Spec: incompressible bytes, log-normal sizes
	FormatJPEG  = "jpeg"  // datagen.JPEGSpec: decodable JPEGs, log-normal pixel dimensions
)

// Config of one generation. Exactly one of Out and S3 is set.
type Config struct {
	Format  string           // FormatBytes (also when empty) or FormatJPEG
	Spec    datagen.Spec     // the dataset of FormatBytes
	JPEG    datagen.JPEGSpec // the dataset of FormatJPEG
	Out     string           // local directory
	S3      string           // s3://bucket/prefix?endpoint=…&region=…
	Workers int              // parallel writes or uploads
}

func main() {
	var (
		c              Config
		bytes          string
		files, classes int
		seed           uint64
	)
	flag.StringVar(&c.Format, "format", FormatBytes, "what the files hold: bytes (incompressible, sized by --bytes) or jpeg (decodable images)")
	flag.IntVar(&files, "files", 2000, "number of files")
	flag.StringVar(&bytes, "bytes", "", "--format bytes only: target total size (e.g. 300MB, 1GiB); default: whatever the default median gives")
	flag.Uint64Var(&seed, "seed", 1, "random seed: the same seed gives the same dataset")
	flag.IntVar(&classes, "classes", 0, "class directories (default 20 for bytes, 10 for jpeg)")
	flag.IntVar(&c.JPEG.Quality, "quality", 90, "--format jpeg only: JPEG quality 1-100")
	flag.IntVar(&c.JPEG.MedianPixels, "median-pixels", 0, "--format jpeg only: median width×height (default 135000, ~100 KB files)")
	flag.StringVar(&c.Out, "out", "", "write to this local directory")
	flag.StringVar(&c.S3, "s3", "", "upload to this S3 URL: s3://bucket/prefix?endpoint=http://host:9000&region=us-east-1")
	flag.IntVar(&c.Workers, "workers", 16, "parallel writes or uploads")
	flag.Parse()
	if c.Format == FormatJPEG {
		c.JPEG.Files, c.JPEG.Classes, c.JPEG.Seed = files, classes, seed
	} else {
		c.Spec.Files, c.Spec.Classes, c.Spec.Seed = files, classes, seed
		flag.Visit(func(f *flag.Flag) {
			if f.Name == "quality" || f.Name == "median-pixels" {
				fmt.Fprintf(os.Stderr, "gen: --%s is for --format jpeg\n", f.Name)
				os.Exit(2)
			}
		})
		c.JPEG = datagen.JPEGSpec{}
	}
	if bytes != "" {
		if c.Format == FormatJPEG {
			fmt.Fprintln(os.Stderr, "gen: --bytes is for --format bytes; JPEG sizes follow from their pixels (see --median-pixels)")
			os.Exit(2)
		}
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

// object is one file to write: its path under the root and its content.
type object struct {
	path string
	open func() (io.Reader, int64, error)
}

// plan returns the objects of c's format, the class count and a note on the
// draw for the summary.
func plan(c Config) ([]object, int, string, error) {
	switch c.Format {
	case FormatBytes, "":
		if c.JPEG != (datagen.JPEGSpec{}) {
			return nil, 0, "", errors.New("--quality and --median-pixels are for --format jpeg")
		}
		if err := c.Spec.Validate(); err != nil {
			return nil, 0, "", err
		}
		files := c.Spec.Plan()
		objs := make([]object, len(files))
		for i, f := range files {
			objs[i] = object{f.Path, func() (io.Reader, int64, error) { return datagen.Reader(f.Seed, f.Size), f.Size, nil }}
		}
		classes := c.Spec.Classes
		if classes == 0 {
			classes = 20
		}
		return objs, classes, fmt.Sprintf("seed %d, median %s", c.Spec.Seed, units.FormatSize(c.Spec.Median())), nil
	case FormatJPEG:
		if c.Spec.TotalBytes != 0 {
			return nil, 0, "", errors.New("--bytes is for --format bytes; JPEG sizes follow from their pixels (see --median-pixels)")
		}
		ims, err := c.JPEG.Plan()
		if err != nil {
			return nil, 0, "", err
		}
		objs := make([]object, len(ims))
		for i, im := range ims {
			objs[i] = object{im.Path, func() (io.Reader, int64, error) {
				b, err := im.Encode()
				return bytes.NewReader(b), int64(len(b)), err
			}}
		}
		return objs, ims[0].NumClasses, fmt.Sprintf("seed %d, jpeg quality %d", c.JPEG.Seed, ims[0].Quality), nil
	}
	return nil, 0, "", fmt.Errorf("--format %q: want %s or %s", c.Format, FormatBytes, FormatJPEG)
}

func run(ctx context.Context, c Config, stdout io.Writer) error {
	switch {
	case (c.Out == "") == (c.S3 == ""):
		return errors.New("give exactly one of --out DIR and --s3 URL")
	case c.Workers < 1:
		return fmt.Errorf("--workers %d: want at least 1", c.Workers)
	}
	objs, classes, note, err := plan(c)
	if err != nil {
		return err
	}
	start := time.Now()
	where, put, err := sink(ctx, c)
	if err != nil {
		return err
	}
	sizes := make([]int64, len(objs))
	err = parallel(ctx, len(objs), c.Workers, func(ctx context.Context, i int) error {
		r, n, err := objs[i].open()
		if err != nil {
			return err
		}
		sizes[i] = n
		return put(ctx, objs[i].path, r, n)
	})
	if err != nil {
		return err
	}
	el := time.Since(start)
	var total int64
	for _, n := range sizes {
		total += n
	}
	slices.Sort(sizes)
	fmt.Fprintf(stdout, "generated %d files, %s (%d bytes) in %d classes to %s: %s, sizes min %s median %s max %s, in %s (%.0f files/s, %s/s)\n",
		len(objs), units.FormatSize(total), total, classes, where, note,
		units.FormatSize(sizes[0]), units.FormatSize(sizes[len(sizes)/2]), units.FormatSize(sizes[len(sizes)-1]),
		el.Round(time.Millisecond), float64(len(objs))/el.Seconds(), units.FormatSize(int64(float64(total)/el.Seconds())))
	return nil
}

// sink returns where c writes to and the function that stores one file there.
func sink(ctx context.Context, c Config) (string, func(context.Context, string, io.Reader, int64) error, error) {
	if c.Out != "" {
		return c.Out, func(_ context.Context, p string, r io.Reader, _ int64) error { return writeLocal(c.Out, p, r) }, nil
	}
	client, bucket, prefix, err := s3Client(ctx, c.S3)
	if err != nil {
		return "", nil, err
	}
	put := func(ctx context.Context, p string, r io.Reader, n int64) error {
		key := p
		if prefix != "" {
			key = prefix + "/" + p
		}
		_, err := client.PutObject(ctx, bucket, key, r, n,
			minio.PutObjectOptions{ContentType: "image/jpeg", DisableMultipart: n < 64<<20})
		if err != nil {
			return fmt.Errorf("put %s/%s: %w", bucket, key, err)
		}
		return nil
	}
	return "s3://" + bucket + "/" + prefix, put, nil
}

// parallel runs put for every index 0..n-1 with workers goroutines; the
// first error stops the rest.
func parallel(ctx context.Context, n, workers int, put func(context.Context, int) error) error {
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
				if i >= int64(n) {
					return
				}
				if err := put(ctx, int(i)); err != nil {
					cancel(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return context.Cause(ctx)
}

// writeLocal writes one file under dir: a temporary file renamed into place.
func writeLocal(dir, rel string, r io.Reader) error {
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp := p + ".tmp"
	out, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, r); err != nil {
		out.Close()
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", p, err)
	}
	if err := out.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, p)
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
