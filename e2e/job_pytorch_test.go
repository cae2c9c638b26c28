package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/kube"
	"github.com/epochfs/epochfs/internal/testenv/s3"
	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

// The PyTorch end-to-end job's dataset: small JPEGs (a median of about
// 200×200 px) so that two epochs over 2,000 of them decode in a few minutes
// on 2 shared cores; about 100 MB in all.
var torchJobImages = datagen.JPEGSpec{Files: 2000, Classes: 10, Seed: 24, MedianPixels: 40_000, Quality: 90}

// torchEvent is one JSON line of examples/pytorch/train.py's stdout.
type torchEvent struct {
	Event      string  `json:"event"` // start, epoch, done
	Rank       int     `json:"rank"`
	World      int     `json:"world"`
	Dataset    int     `json:"dataset"` // start: images in the ImageFolder
	Classes    int     `json:"classes"`
	Epoch      int     `json:"epoch"`
	Epochs     int     `json:"epochs"` // done
	Samples    int     `json:"samples"`
	ImagesPerS float64 `json:"images_per_s"`
	Loss       float64 `json:"loss"`
	Seconds    float64 `json:"seconds"`
	Checksum   string  `json:"checksum"` // 16 hex digits
	Indices    []int   `json:"indices"`  // the dataset indices the rank read, sorted
}

// TestTrainingJobPyTorch is the product's main end-to-end run: real
// PyTorch (Debian's torch 1.13 and torchvision 0.14 in the
// epochfs/torch-example image) trains on real JPEGs in a private MinIO
// bucket through an EpochFS volume the TrainingJob controller makes, on the
// real kubelet. A pytorch-mode job of 2 worker pods with nprocPerNode 1
// runs `torchrun --tee 3 .../train.py` with the environment the controller
// sets (PET_NNODES=2, each pod's PET_NODE_RANK, worker 0 the master):
// ImageFolder → DataLoader with 2 worker processes → a tiny CNN → DDP over
// gloo, 2 epochs, the node's cache half the dataset (C = D/2).
//
// It checks: the job Succeeds; each pod ran one rank; in each epoch the
// two ranks (one per pod, both reading the node's one mount) read disjoint
// DistributedSampler shards whose union is every image; the order-free
// checksums of the decoded tensors add up to the same sum in both epochs
// (the same images, decoded the same); epoch 2's mean loss is below epoch
// 1's; and epoch 2's NR byte hit ratio on the node, from the node plugin's
// /metrics, is C/D within 2 % (the arithmetic is at checkTorchHitRatio).
//
// The job is docs/PYTORCH.md's `cachefs job submit` command, taken from
// the doc (whose YAML it must print with --dry-run), with the image, the
// source, the cache size and the CPU request of the test cluster.
// The test cluster has no DNS, and the tests send packets to the loopback
// only: a worker template puts the pods in the node's network
// (hostNetwork, which the chart allows with jobController.allowHostNetwork),
// resolves the master's name (worker 0's in the job's Service domain,
// PET_MASTER_ADDR) to 127.0.0.1 and sets GLOO_SOCKET_IFNAME=lo, so the two
// pods' ranks talk over the node's loopback. In the node's network the
// controller declares no rendezvous container port (it would be a host
// port, and the second pod would not fit on the node).
func TestTrainingJobPyTorch(t *testing.T) {
	requireE2E(t)
	torchTar, _ := imageArchive(t, "torch-example")
	mi := s3.StartMinIO(t)
	mi.MakeBucket(t, "training")
	images, total := putTorchImages(t, mi, "training", "imagenet/")
	e := installJobController(t, append(minioRules(mi, "training"), "--set", "jobController.allowHostNetwork=true")...)
	// The torch image (1.26 GB, 477 MB gzipped) goes through the test's
	// registry too, pulled by the kubelet with the default pull policy as a
	// user's TrainingJob would: measured on the 2-core machine, push 2.1 s +
	// pull and unpack 34.4 s against 27.7 s for `ctr images import` into a
	// fresh containerd (bench/RESULTS.md, "Test and CI times"), some 9 s for
	// the one test that uses it, and the job's workers then take the pull
	// path users take. Pushed by this test alone: the others do not pay.
	start := time.Now()
	torchRef, err := e.registry.Push(context.Background(), torchTar)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("pushed %s as %s in %.1fs\n", filepath.Base(torchTar), torchRef, time.Since(start).Seconds())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cs := e.c.Client
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "imagenet-s3", Namespace: jobNamespace},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": mi.AccessKey, "AWS_SECRET_ACCESS_KEY": mi.SecretKey}}
	if _, err := cs.CoreV1().Secrets(jobNamespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	const pods, ranks, epochs = 2, 1, 2
	capacity := total / 2
	source := "s3://training/imagenet?endpoint=" + mi.Endpoint + "&region=us-east-1"
	args := torchDocSubmit(t, e)
	name := args[1]
	// What the test cluster changes (docs/PYTORCH.md, "How it is tested").
	for flag, value := range map[string]string{"-n": jobNamespace, "--image": torchRef, "--cpu": "100m",
		"--dataset": "imagenet=" + source + ":/data", "--cache-size": strconv.FormatInt(capacity, 10)} {
		setFlag(t, args, flag, value)
	}
	dash := slices.Index(args, "--")
	args = append(args[:dash:dash], append([]string{ // the default pull policy: IfNotPresent
		"--worker-template", torchWorkerTemplate(t, name)}, args[dash:]...)...)
	start = time.Now()
	e.mustJob(t, args...)
	// The volume's mount, and its metrics, last as long as a pod uses it:
	// a pod of the test holds the job's claim, so that the counters are
	// still there when the workers are gone.
	holdClaim(ctx, t, e, name+"-imagenet")
	tj := e.waitPhase(ctx, t, name, v1alpha1.PhaseSucceeded)
	fmt.Printf("TrainingJob %s (pytorch, %d pod × %d processes): %d epochs over %d JPEGs (%d bytes) Succeeded %.1fs after submit\n",
		name, pods, ranks, epochs, len(images), total, time.Since(start).Seconds())
	if tj.Status.Workers.Succeeded != pods {
		t.Errorf("status.workers %+v, want %d succeeded", tj.Status.Workers, pods)
	}
	// Each pod ran its one rank (its node rank); together they are the world.
	var logs strings.Builder
	for w := range pods {
		log := e.mustJob(t, "logs", name, "--worker", strconv.Itoa(w))
		if want := fmt.Sprintf(`{"event":"start","rank":%d,"world":%d,`, w, pods*ranks); !strings.Contains(log, want) {
			t.Errorf("worker %d's log has no %s…; tail:\n%s", w, want, tail(log, 2000))
		}
		logs.WriteString(log + "\n")
	}
	byRank := torchEvents(t, logs.String(), pods*ranks)
	checkTorchEpochs(t, byRank, len(images), torchJobImages.Classes, epochs)
	pvs, err := cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelOwnerUID + "=" + string(tj.UID)})
	if err != nil || len(pvs.Items) != 1 {
		t.Fatalf("PVs of the job: %v, %d, want 1", err, len(pvs.Items))
	}
	// One mount served both epochs: the kubelet staged the PV once (had
	// the holder come after the workers, a second staging would have
	// restarted the counters).
	if n := kubeletLogLines(t, e.c, "MountVolume.MountDevice succeeded", pvs.Items[0].Name); n != 1 {
		t.Fatalf("the kubelet staged %s %d times, want once", pvs.Items[0].Name, n)
	}
	checkTorchHitRatio(t, e.scrapeNode(t), total, capacity)
}

// torchDocSubmit returns the arguments of docs/PYTORCH.md's `cachefs job
// submit torch-imagenet` command (after "cachefs job"), having checked that
// with --dry-run it prints the doc's TrainingJob torch-imagenet.
func torchDocSubmit(t *testing.T, e *jobEnv) []string {
	t.Helper()
	args := docCommand(t, "docs/PYTORCH.md", "cachefs job submit torch-imagenet ")[2:]
	want := &v1alpha1.TrainingJob{}
	if err := yaml.UnmarshalStrict(kube.DocExample(t, "docs/PYTORCH.md", "TrainingJob", "torch-imagenet"), want); err != nil {
		t.Fatalf("docs/PYTORCH.md example torch-imagenet: %v", err)
	}
	dash := slices.Index(args, "--")
	if dash < 0 {
		t.Fatalf("docs/PYTORCH.md: the submit command has no -- before the command: %q", args)
	}
	dry := append(append(append([]string(nil), args[:dash]...), "--dry-run", "-o", "yaml"), args[dash:]...)
	out, err := exec.Command(e.cli, dry...).CombinedOutput()
	if err != nil {
		t.Fatalf("cachefs job %s: %v\n%s", strings.Join(dry, " "), err, out)
	}
	got := &v1alpha1.TrainingJob{}
	if err := yaml.UnmarshalStrict(out, got); err != nil {
		t.Fatalf("the --dry-run YAML: %v\n%s", err, out)
	}
	if got.Name != want.Name || got.Namespace != want.Namespace || !equality.Semantic.DeepEqual(got.Spec, want.Spec) {
		t.Fatalf("docs/PYTORCH.md: the submit command prints\n%s\nnot the doc's TrainingJob torch-imagenet", out)
	}
	if want.Spec.Mode != v1alpha1.ModePyTorch || want.Spec.Workers != 2 || want.Spec.NprocPerNode == nil || *want.Spec.NprocPerNode != 1 ||
		len(want.Spec.Datasets) != 1 || want.Spec.Command[0] != "torchrun" {
		t.Fatalf("the doc's job is no longer 2 pytorch workers of 1 process with one dataset and torchrun: %+v", want.Spec)
	}
	return args
}

// docCommand returns the words of the shell command in a ```sh block of
// file (relative to the repository) that starts with prefix: continuation
// lines joined, single quotes removed (the commands of the docs use no
// other quoting), an unquoted "#" and what follows dropped.
func docCommand(t *testing.T, file, prefix string) []string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range strings.Split(string(doc), "```sh\n")[1:] {
		body, _, _ := strings.Cut(block, "```")
		for _, line := range strings.Split(strings.ReplaceAll(body, "\\\n", " "), "\n") {
			if strings.HasPrefix(line, prefix) {
				return shellWords(t, line)
			}
		}
	}
	t.Fatalf("%s has no sh command starting %q", file, prefix)
	return nil
}

// shellWords splits line into words at unquoted blanks, with single
// quotes only, stopping at an unquoted "#".
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var w strings.Builder
	inWord, quoted := false, false
	for _, r := range line {
		switch {
		case r == '\'':
			quoted, inWord = !quoted, true
		case !quoted && (r == ' ' || r == '\t'):
			if inWord {
				words, inWord = append(words, w.String()), false
				w.Reset()
			}
		case !quoted && r == '#' && !inWord:
			return words
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quoted {
		t.Fatalf("unbalanced quote in %q", line)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}

// setFlag sets the value after flag in args (before "--"), which must be
// there.
func setFlag(t *testing.T, args []string, flag, value string) {
	t.Helper()
	for i, a := range args {
		if a == "--" {
			break
		}
		if a == flag && i+1 < len(args) {
			args[i+1] = value
			return
		}
	}
	t.Fatalf("no %s in %q", flag, args)
}

// putTorchImages writes torchJobImages into bucket under prefix and returns
// them with their total size in bytes (D).
func putTorchImages(t *testing.T, mi *s3.MinIO, bucket, prefix string) ([]datagen.Image, int64) {
	t.Helper()
	dir := t.TempDir()
	start := time.Now()
	images, err := datagen.WriteJPEGs(dir, torchJobImages, 2)
	if err != nil {
		t.Fatal(err)
	}
	total, err := putDir(mi, bucket, prefix, dir, images, 8)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing but the images: ImageFolder would count any other file.
	n := 0
	if err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return err
	}); err != nil || n != len(images) {
		t.Fatalf("%d files written for %d images: %v", n, len(images), err)
	}
	fmt.Printf("%d JPEGs in %d classes, %d bytes (%.1f MB), generated and put in MinIO in %.1fs\n",
		len(images), torchJobImages.Classes, total, float64(total)/1e6, time.Since(start).Seconds())
	return images, total
}

// putDir puts the images' files under dir into bucket as prefix+path, up
// to workers at once, and returns their total size.
func putDir(mi *s3.MinIO, bucket, prefix, dir string, images []datagen.Image, workers int) (int64, error) {
	var (
		wg    sync.WaitGroup
		total atomic.Int64
		first atomic.Value // error
		next  atomic.Int64
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(len(images)) && first.Load() == nil; i = next.Add(1) - 1 {
				b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(images[i].Path)))
				if err == nil {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					_, err = mi.Client().PutObject(ctx, bucket, prefix+images[i].Path, bytes.NewReader(b), int64(len(b)),
						minio.PutObjectOptions{ContentType: "image/jpeg"})
					cancel()
				}
				if err != nil {
					first.CompareAndSwap(nil, fmt.Errorf("put %s: %w", images[i].Path, err))
					return
				}
				total.Add(int64(len(b)))
			}
		}()
	}
	wg.Wait()
	if err, _ := first.Load().(error); err != nil {
		return 0, err
	}
	return total.Load(), nil
}

// torchWorkerTemplate writes the worker pod template of job name: the
// master's name (worker 0's, PET_MASTER_ADDR) on the pod's loopback, and
// gloo on the loopback interface.
func torchWorkerTemplate(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "worker.yaml")
	tmpl := fmt.Sprintf(`
spec:
  hostNetwork: true
  hostAliases:
  - ip: 127.0.0.1
    hostnames: [%s-0.%s]
  containers:
  - name: %s
    env:
    - name: GLOO_SOCKET_IFNAME
      value: lo
`, name, name, v1alpha1.ContainerName)
	if err := os.WriteFile(p, []byte(tmpl), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// holdClaim runs a pod that mounts claim (read-only) and sleeps, and waits
// for it to run: the kubelet then keeps the volume staged, its mount
// process and its metrics, after the job's workers end. t.Cleanup deletes
// it and waits for it to go.
func holdClaim(ctx context.Context, t *testing.T, e *jobEnv, claim string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "claim-holder", Namespace: jobNamespace},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			// sleep as PID 1 ignores SIGTERM: no grace to wait out at teardown.
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name: "hold", Image: e.readerImage, ImagePullPolicy: corev1.PullNever,
				Command:      []string{"sleep", "3600"},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data", ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: true}}}},
		},
	}
	pods := e.c.Client.CoreV1().Pods(jobNamespace)
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Gone before the chart is (t.Cleanup runs last in, first out): the node
	// plugin must still be there to unpublish its volume.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
			t.Logf("delete pod %s: %v", pod.Name, err)
			return
		}
		for ctx.Err() == nil {
			if _, err := pods.Get(ctx, pod.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Logf("pod %s not gone a minute after its deletion", pod.Name)
	})
	for {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning {
			return
		}
		if ctx.Err() != nil || (err == nil && p.Status.Phase != corev1.PodPending) {
			e.describe(t, jobNamespace, pod.Name)
			t.Fatalf("the pod holding claim %s does not run: %v", claim, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// torchEvents parses the worker's log (`cachefs job logs`): torchrun --tee 3
// prefixes each line of local rank N with "[defaultN]:"; train.py's JSON
// lines are the ones that then start with "{" (its human lines do not).
// Each of the ranks must have a start event, its epochs and then done.
func torchEvents(t *testing.T, log string, ranks int) map[int][]torchEvent {
	t.Helper()
	byRank := map[int][]torchEvent{}
	for _, line := range strings.Split(log, "\n") {
		if strings.HasPrefix(line, "[default") {
			if _, rest, ok := strings.Cut(line, "]:"); ok {
				line = rest
			}
		}
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var ev torchEvent
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if ev.Rank < 0 || ev.Rank >= ranks {
			t.Fatalf("rank %d out of 0..%d: %q", ev.Rank, ranks-1, line)
		}
		byRank[ev.Rank] = append(byRank[ev.Rank], ev)
	}
	for rank := range ranks {
		evs := byRank[rank]
		if len(evs) < 2 || evs[0].Event != "start" || evs[len(evs)-1].Event != "done" {
			t.Fatalf("rank %d: events %+v, want start … done; log:\n%s", rank, evs, tail(log, 4000))
		}
	}
	return byRank
}

// checkTorchEpochs checks the ranks' events: the world and the dataset
// each rank saw, every epoch present once per rank, the shards of each
// epoch disjoint with every image in their union and the rank's sample
// count its shard's size, the checksums' sum the same in every epoch, and
// the mean loss lower in the last epoch than in the first. It prints each
// epoch's rate and duration per rank.
func checkTorchEpochs(t *testing.T, byRank map[int][]torchEvent, images, classes, epochs int) {
	t.Helper()
	world := len(byRank)
	sums := make([]uint64, epochs+1)
	loss := make([]float64, epochs+1)
	for rank := range world {
		evs := byRank[rank]
		if s := evs[0]; s.World != world || s.Dataset != images || s.Classes != classes {
			t.Errorf("rank %d start: world %d, dataset %d, classes %d; want %d, %d, %d", rank, s.World, s.Dataset, s.Classes, world, images, classes)
		}
		if done := evs[len(evs)-1]; done.Epochs != epochs || len(evs) != epochs+2 {
			t.Fatalf("rank %d: %d events, done after %d epochs; want %d epochs", rank, len(evs), done.Epochs, epochs)
		}
		for i, ev := range evs[1 : epochs+1] {
			if ev.Event != "epoch" || ev.Epoch != i+1 || ev.World != world || ev.Samples != len(ev.Indices) {
				t.Fatalf("rank %d event %d: %+v, want epoch %d of world %d with samples = len(indices)", rank, i+1, ev, i+1, world)
			}
			c, err := strconv.ParseUint(ev.Checksum, 16, 64)
			if err != nil || len(ev.Checksum) != 16 {
				t.Fatalf("rank %d epoch %d: checksum %q, want 16 hex digits", rank, ev.Epoch, ev.Checksum)
			}
			sums[ev.Epoch] += c // mod 2^64: the order-free sum over the ranks
			loss[ev.Epoch] += ev.Loss / float64(world)
			fmt.Printf("epoch %d rank %d: %d images in %.1fs, %.1f images/s, loss %.4f, checksum %s\n",
				ev.Epoch, rank, ev.Samples, ev.Seconds, ev.ImagesPerS, ev.Loss, ev.Checksum)
		}
	}
	for epoch := 1; epoch <= epochs; epoch++ {
		seen := make([]int, images) // the rank that read each index, +1
		for rank := range world {
			for _, idx := range byRank[rank][epoch].Indices {
				switch {
				case idx < 0 || idx >= images:
					t.Fatalf("epoch %d rank %d: index %d out of 0..%d", epoch, rank, idx, images-1)
				case seen[idx] != 0:
					t.Fatalf("epoch %d: index %d read by rank %d and rank %d: the shards overlap", epoch, idx, seen[idx]-1, rank)
				}
				seen[idx] = rank + 1
			}
		}
		if n := countZero(seen); n > 0 {
			t.Fatalf("epoch %d: %d of %d images read by no rank", epoch, n, images)
		}
		if sums[epoch] != sums[1] {
			t.Errorf("epoch %d: the ranks' checksums add up to %016x, epoch 1's to %016x: not the same images decoded the same", epoch, sums[epoch], sums[1])
		}
	}
	fmt.Printf("mean loss: epoch 1 %.4f, epoch %d %.4f; every epoch's shards disjoint, covering all %d images, checksum sum %016x\n",
		loss[1], epochs, loss[epochs], images, sums[1])
	if !(loss[epochs] < loss[1]) {
		t.Errorf("mean loss %.4f in epoch %d, not below epoch 1's %.4f", loss[epochs], epochs, loss[1])
	}
}

func countZero(s []int) int {
	n := 0
	for _, v := range s {
		if v == 0 {
			n++
		}
	}
	return n
}

// checkTorchHitRatio checks epoch 2's byte hit ratio from the node plugin's
// /metrics, summed over its dataset mounts (one here), after a job of two
// epochs over D = total bytes with a cache of C = capacity bytes.
//
// Every JPEG is far below --whole-file-max, so each open is one lookup of
// the file's whole size, a hit or a miss: every epoch opens each image once
// (the shards are disjoint and cover the dataset, checkTorchEpochs), so the
// lookups add up to D per epoch, 2·D for the job, whatever the page cache
// holds. Epoch 1 is cold: each lookup is a miss, or the first read of a
// file readahead fetched ahead of the loader (a prefetched hit: counted in
// hit bytes, but no earlier read cached it). NR admits on a miss while the
// entry fits and never evicts, so after epoch 1 the cache holds U bytes,
// C − (one image) < U ≤ C (cachefs_cache_used_bytes). Epoch 2 finds exactly
// those: its hits are U bytes and its lookups D. The counters are totals
// of both epochs, so:
//
//	epoch 2's lookups = hit + miss − D   (want D)
//	epoch 2's NR hits = hit − prefetched_hit   (epoch 1's hits were all prefetched)
//	ratio = (hit − prefetched_hit) / (hit + miss − D) ≈ U/D ≈ C/D = 1/2
func checkTorchHitRatio(t *testing.T, body string, total, capacity int64) {
	t.Helper()
	metric := func(name string) float64 {
		v, ok := sumSamples(body, name)
		if !ok {
			t.Fatalf("the node plugin's /metrics has no %s:\n%s", name, tail(body, 3000))
		}
		return v
	}
	hit, miss, prefetched := metric("cachefs_cache_hit_bytes_total"), metric("cachefs_cache_miss_bytes_total"), metric("cachefs_cache_prefetched_hit_bytes_total")
	used, capBytes := metric("cachefs_cache_used_bytes"), metric("cachefs_cache_capacity_bytes")
	d, c := float64(total), float64(capacity)
	if capBytes != c {
		t.Errorf("cache capacity %v bytes, want --cache-size %v", capBytes, c)
	}
	if used > c {
		t.Errorf("cache holds %v bytes, more than its capacity %v", used, c)
	}
	epoch2 := hit + miss - d
	if hit+miss != 2*d {
		t.Errorf("lookups of %v bytes in 2 epochs, want 2·D = %v (each image opened once per epoch)", hit+miss, 2*d)
	}
	ratio, want := (hit-prefetched)/epoch2, c/d
	fmt.Printf("node plugin metrics: hit %.0f miss %.0f prefetched-hit %.0f bytes, cache used %.0f of %.0f; "+
		"epoch 2 NR byte hit ratio %.4f, C/D = %.4f (used/D %.4f)\n", hit, miss, prefetched, used, capBytes, ratio, want, used/d)
	if math.Abs(ratio-want) > 0.02*want {
		t.Errorf("epoch 2's byte hit ratio %.4f, want C/D = %.4f within 2 %%", ratio, want)
	}
}
