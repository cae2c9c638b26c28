package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/epochfs/epochfs/internal/cliprint"
	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
	"github.com/epochfs/epochfs/pkg/job/controller"
	"github.com/epochfs/epochfs/pkg/source"
	"github.com/epochfs/epochfs/pkg/units"
	"github.com/epochfs/epochfs/pkg/volattr"
)

type submitFlags struct {
	image, mode, cpu, memory, priorityClass string
	imagePullPolicy                         string
	workers, ps, gpus, port                 int32
	datasets, envs, extra                   []string
	nodeSelector, tolerations               []string
	cacheSize                               sizeText
	datasetSecret                           string
	prefetch                                bool
	chief                                   bool
	readaheadFiles                          string
	gangScheduler, queue                    string
	noGang                                  bool
	minAvailable                            int32
	backoffLimit                            int32
	ttl                                     int32
	cleanPodPolicy                          string
	tensorboard                             string
	dryRun                                  bool
	output                                  string
	shmSize                                 shmSize
	nprocPerNode                            int32
	maxRestarts                             int32
	successPolicy                           string
	suspend                                 bool
	queueName, serviceAccount               string
	pullSecrets, labels, annotations        []string
	workerTemplate, psTemplate              string
}

func newJobSubmitCmd(f *jobFlags) *cobra.Command {
	s := &submitFlags{}
	cmd := &cobra.Command{
		Use:   "submit NAME --image IMAGE [flags] [-- COMMAND [ARGS...]]",
		Short: "Submit a training job",
		Example: `  cachefs job submit resnet --image pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime \
      --workers 4 --gpus 8 --mode pytorch \
      --dataset 'imagenet=s3://datasets/imagenet/train?endpoint=http://minio:9000:/data/imagenet' \
      --env EPOCHS=90 -- torchrun train.py --data /data/imagenet`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return s.run(cmd, f, args) },
	}
	s.bind(cmd.Flags())
	outputFlag(cmd, &s.output, "a sentence; with --dry-run yaml", listOutputs...)
	return cmd
}

// run submits the job NAME of args (or prints it with --dry-run).
func (s *submitFlags) run(cmd *cobra.Command, f *jobFlags, args []string) error {
	name, command := args[0], args[1:]
	if dash := cmd.ArgsLenAtDash(); dash > 1 {
		return fmt.Errorf("one NAME before --, got %q", args[:dash])
	} else if dash == -1 && len(args) > 1 {
		return fmt.Errorf("put the command after --: cachefs job submit %s [flags] -- %s", name, strings.Join(args[1:], " "))
	}
	if err := checkOutput(s.output, listOutputs...); err != nil {
		return err
	}
	tj, err := s.trainingJob(name, command, cmd.Flags().Changed("backoff-limit"), cmd.Flags().Changed("ttl"))
	if err != nil {
		return err
	}
	if err := s.templates(tj); err != nil {
		return err
	}
	if cmd.Flags().Changed("nproc-per-node") {
		// 0 and negative go to the API server, which refuses them
		// naming spec.nprocPerNode.
		tj.Spec.NprocPerNode = &s.nprocPerNode
	}
	if cmd.Flags().Changed("max-restarts") {
		// A negative one goes to the API server too, which refuses
		// it naming spec.maxRestarts.
		tj.Spec.MaxRestarts = &s.maxRestarts
	}
	tj.Spec.SuccessPolicy = v1alpha1.SuccessPolicy(s.successPolicy)
	if s.dryRun {
		if ns := f.overrides.Context.Namespace; ns != "" {
			tj.Namespace = ns
		}
		return printSpec(cmd.OutOrStdout(), f.now(), tj, orDefault(s.output, outYAML))
	}
	jc, err := f.clients()
	if err != nil {
		return err
	}
	tj.Namespace = jc.namespace
	if err := setAuthor(cmd.Context(), jc.c, tj); err != nil {
		return apiError(err, "submit "+name)
	}
	if err := jc.c.Create(cmd.Context(), tj); err != nil {
		return apiError(err, "submit "+name)
	}
	if s.output != "" {
		return printJobs(cmd.OutOrStdout(), f.now(), s.output, "", false, false, tj)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "trainingjob.jobs.epochfs.io/%s submitted to namespace %s; follow it with: cachefs job get %s -n %s\n",
		name, jc.namespace, name, jc.namespace)
	return nil
}

// bind defines the submit flags on fl.
func (s *submitFlags) bind(fl *pflag.FlagSet) {
	fl.StringVar(&s.image, "image", "", "container image of the workers (required)")
	fl.StringVar(&s.imagePullPolicy, "image-pull-policy", "", "Always, IfNotPresent or Never (default: Kubernetes', IfNotPresent unless the tag is latest); Never for images imported into the nodes")
	fl.Int32Var(&s.workers, "workers", 1, "number of worker pods")
	fl.StringVar(&s.mode, "mode", "standalone", "how workers find each other: standalone, pytorch, tensorflow or mpi")
	fl.Int32Var(&s.ps, "ps", 0, "TensorFlow parameter servers (mode tensorflow)")
	fl.BoolVar(&s.chief, "chief", false, "a TensorFlow chief replica besides the workers (mode tensorflow): spec.tensorflow.chief")
	fl.Int32Var(&s.gpus, "gpus", 0, "GPUs (nvidia.com/gpu) per worker")
	fl.StringVar(&s.cpu, "cpu", "", "CPU request per worker, e.g. 8 or 500m")
	fl.StringVar(&s.memory, "memory", "", "memory per worker, e.g. 64Gi")
	fl.StringArrayVar(&s.extra, "device", nil, "extra device resource per worker, RESOURCE=COUNT (repeatable), e.g. rdma/hca=1")
	fl.StringArrayVar(&s.datasets, "dataset", nil, "dataset NAME=SOURCE:MOUNTPATH or NAME=claim:PVC:MOUNTPATH (repeatable); SOURCE as for cachefs mount")
	fl.StringVar(&s.datasetSecret, "dataset-secret", "", "Secret of the job's namespace with the credentials of every --dataset with a SOURCE (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY for s3://, userID and userKey for cephfs://; nfs:// has none); the kubelet hands it to the CSI driver (default: the node's own identity, where allowed)")
	fl.Var(&s.cacheSize, "cache-size", "node cache size of every --dataset with a SOURCE, e.g. 500Gi, 500G or 500GiB (the size grammar of docs/DESIGN.md; not 500m)")
	fl.BoolVar(&s.prefetch, "prefetch", false, "ask for the datasets to be prefetched into the node caches")
	fl.StringVar(&s.readaheadFiles, "readahead-files", volattr.ReadaheadFilesAuto, "on a missed open, fetch this many next files of the directory into the node cache, for every --dataset with a SOURCE: 'auto' (the node follows the backend's latency: on for far object stores, off for local ones; the field is left unset) or 0-256 (0: off)")
	fl.StringArrayVar(&s.envs, "env", nil, "environment variable K=V of every worker (repeatable)")
	fl.StringVar(&s.gangScheduler, "gang-scheduler", "", "volcano (default) or scheduler-plugins")
	fl.StringVar(&s.queue, "queue", "", "Volcano queue")
	fl.BoolVar(&s.noGang, "no-gang", false, "start workers as they are scheduled, not all at once")
	fl.Int32Var(&s.minAvailable, "min-available", 0, "pods that must be placeable together (default: all)")
	fl.Int32Var(&s.port, "port", 0, "rendezvous port (default 29500 for pytorch, 2222 for tensorflow)")
	fl.StringVar(&s.priorityClass, "priority-class", "", "PriorityClass of the workers")
	fl.StringArrayVar(&s.nodeSelector, "node-selector", nil, "node label LABEL=VALUE the workers need (repeatable)")
	fl.StringArrayVar(&s.tolerations, "toleration", nil, "taint the workers tolerate, KEY[=VALUE][:EFFECT] (repeatable), e.g. dedicated=ml:NoSchedule; GPU workers tolerate nvidia.com/gpu:NoSchedule on their own")
	fl.Int32Var(&s.backoffLimit, "backoff-limit", 0, "failed pods an attempt replaces alone before it fails and the whole gang restarts (for standalone workers only: a replaced pod cannot rejoin a rendezvous)")
	fl.Int32Var(&s.maxRestarts, "max-restarts", 3, "times the whole gang (every pod, a new rendezvous) restarts after a failure before the job fails; 0: fail on the first")
	fl.StringVar(&s.successPolicy, "success-policy", "", "when the job has succeeded: AllWorkers (default) or Worker0 (default and only choice for mode mpi)")
	fl.Int32Var(&s.ttl, "ttl", 0, "delete the job this many seconds after it finished (default: keep it)")
	fl.StringVar(&s.cleanPodPolicy, "clean-pod-policy", "", "pods deleted when the job finishes: All, Running (default) or None")
	fl.StringVar(&s.tensorboard, "tensorboard-logdir", "", "where workers write TensorBoard event files (TENSORBOARD_LOG_DIR)")
	fl.Var(&s.shmSize, "shm-size", "size of every pod's /dev/shm, a memory-backed emptyDir, e.g. 8Gi or 8GiB (default 2Gi; 0: the container runtime's own, often 64Mi)")
	fl.Int32Var(&s.nprocPerNode, "nproc-per-node", 0, "mode pytorch: processes torchrun starts per worker pod (PET_NPROC_PER_NODE; WORLD_SIZE = workers × this); default --gpus, else 1")
	fl.BoolVar(&s.suspend, "suspend", false, "submit the job suspended: no pods run until `cachefs job resume NAME`")
	fl.StringVar(&s.queueName, "queue-name", "", "Kueue LocalQueue (label kueue.x-k8s.io/queue-name on the Jobs); --queue is Volcano's")
	fl.StringVar(&s.serviceAccount, "service-account", "", "ServiceAccount the pods run as")
	fl.StringArrayVar(&s.pullSecrets, "image-pull-secret", nil, "Secret of the namespace for pulling the image (repeatable)")
	fl.StringArrayVar(&s.labels, "label", nil, "label KEY=VALUE of every pod (repeatable)")
	fl.StringArrayVar(&s.annotations, "annotation", nil, "annotation KEY=VALUE of every pod (repeatable)")
	fl.StringVar(&s.workerTemplate, "worker-template", "", "YAML file with a pod template (metadata and spec) merged into the workers' pods: spec.worker.template")
	fl.StringVar(&s.psTemplate, "ps-template", "", "YAML file with a pod template merged into the parameter servers' pods: spec.ps.template")
	fl.BoolVar(&s.dryRun, "dry-run", false, "print the TrainingJob instead of submitting it")
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// trainingJob builds the TrainingJob from the flags; it checks what the
// API server cannot (dataset URLs) so that mistakes show before submitting.
func (s *submitFlags) trainingJob(name string, command []string, backoffSet, ttlSet bool) (*v1alpha1.TrainingJob, error) {
	tj := &v1alpha1.TrainingJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "TrainingJob"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.TrainingJobSpec{
			Image: s.image, Workers: s.workers, Mode: v1alpha1.Mode(s.mode), ParameterServers: s.ps,
			Port: s.port, PriorityClassName: s.priorityClass,
			Resources: v1alpha1.WorkerResources{GPUs: s.gpus},
		},
	}
	spec := &tj.Spec
	for _, section := range []func(*v1alpha1.TrainingJobSpec) error{
		func(spec *v1alpha1.TrainingJobSpec) error { return s.container(spec, command) },
		s.resources, s.environment, s.placement, s.datasetSpecs,
	} {
		if err := section(spec); err != nil {
			return nil, err
		}
	}
	if s.noGang || s.gangScheduler != "" || s.queue != "" || s.minAvailable > 0 {
		g := &v1alpha1.Gang{Scheduler: v1alpha1.GangScheduler(s.gangScheduler), Queue: s.queue}
		if s.noGang {
			g.Enabled = new(bool)
		}
		if s.minAvailable > 0 {
			g.MinAvailable = &s.minAvailable
		}
		spec.Gang = g
	}
	if backoffSet {
		spec.BackoffLimit = &s.backoffLimit
	}
	if ttlSet {
		spec.Cleanup.TTLSecondsAfterFinished = &s.ttl
	}
	spec.Cleanup.CleanPodPolicy = v1alpha1.CleanPodPolicy(s.cleanPodPolicy)
	if s.tensorboard != "" {
		spec.Tensorboard = &v1alpha1.Tensorboard{LogDir: s.tensorboard}
	}
	spec.Suspend, spec.QueueName, spec.ServiceAccountName = s.suspend, s.queueName, s.serviceAccount
	if err := s.podMeta(spec); err != nil {
		return nil, err
	}
	spec.ShmSize = s.shmSize.q
	return tj, nil
}

// container: --image, --mode, --image-pull-policy, the command and
// --chief.
func (s *submitFlags) container(spec *v1alpha1.TrainingJobSpec, command []string) error {
	if s.image == "" {
		return fmt.Errorf("--image is required: the container image of the workers")
	}
	switch spec.Mode {
	case v1alpha1.ModeStandalone, v1alpha1.ModePyTorch, v1alpha1.ModeTensorFlow, v1alpha1.ModeMPI:
	default:
		return fmt.Errorf("--mode %q: want standalone, pytorch, tensorflow or mpi", s.mode)
	}
	switch p := corev1.PullPolicy(s.imagePullPolicy); p {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
		spec.ImagePullPolicy = p
	default:
		return fmt.Errorf("--image-pull-policy %q: want Always, IfNotPresent or Never", s.imagePullPolicy)
	}
	if len(command) > 0 {
		spec.Command = command
	}
	if s.chief {
		spec.TensorFlow = &v1alpha1.TensorFlowSpec{Chief: true}
	}
	return nil
}

// resources: --cpu, --memory and --device.
func (s *submitFlags) resources(spec *v1alpha1.TrainingJobSpec) error {
	for _, q := range []struct {
		flag, v string
		dst     **resource.Quantity
	}{{"--cpu", s.cpu, &spec.Resources.CPU}, {"--memory", s.memory, &spec.Resources.Memory}} {
		if q.v == "" {
			continue
		}
		v, err := resource.ParseQuantity(q.v)
		if err != nil {
			return fmt.Errorf("%s %q: not a quantity (e.g. 8, 500m, 64Gi)", q.flag, q.v)
		}
		*q.dst = &v
	}
	for _, e := range s.extra {
		k, v, ok := strings.Cut(e, "=")
		q, err := resource.ParseQuantity(v)
		if !ok || err != nil || !strings.Contains(k, "/") {
			return fmt.Errorf("--device %q: want RESOURCE=COUNT with a domain, e.g. rdma/hca=1", e)
		}
		if spec.Resources.Extra == nil {
			spec.Resources.Extra = map[corev1.ResourceName]resource.Quantity{}
		}
		spec.Resources.Extra[corev1.ResourceName(k)] = q
	}
	return nil
}

// environment: --env.
func (s *submitFlags) environment(spec *v1alpha1.TrainingJobSpec) error {
	for _, e := range s.envs {
		k, v, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			return fmt.Errorf("--env %q: want NAME=VALUE", e)
		}
		spec.Env = append(spec.Env, corev1.EnvVar{Name: k, Value: v})
	}
	return nil
}

// placement: --node-selector and --toleration.
func (s *submitFlags) placement(spec *v1alpha1.TrainingJobSpec) error {
	for _, e := range s.nodeSelector {
		k, v, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			return fmt.Errorf("--node-selector %q: want LABEL=VALUE, e.g. pool=h100", e)
		}
		if spec.NodeSelector == nil {
			spec.NodeSelector = map[string]string{}
		}
		spec.NodeSelector[k] = v
	}
	for _, e := range s.tolerations {
		tol, err := parseTolerationFlag(e)
		if err != nil {
			return err
		}
		spec.Tolerations = append(spec.Tolerations, tol)
	}
	return nil
}

// datasetSpecs: --dataset, with --cache-size, --prefetch,
// --readahead-files and --dataset-secret for those with a source.
func (s *submitFlags) datasetSpecs(spec *v1alpha1.TrainingJobSpec) error {
	readahead, err := parseReadaheadFilesFlag(s.readaheadFiles)
	if err != nil {
		return err
	}
	for _, d := range s.datasets {
		ds, err := parseDatasetFlag(d)
		if err != nil {
			return err
		}
		if ds.Source != "" {
			ds.CacheSize, ds.Prefetch, ds.ReadaheadFiles, ds.SecretName = string(s.cacheSize), s.prefetch, readahead, s.datasetSecret
		}
		spec.Datasets = append(spec.Datasets, ds)
	}
	return nil
}

// podMeta: --image-pull-secret, --label and --annotation.
func (s *submitFlags) podMeta(spec *v1alpha1.TrainingJobSpec) error {
	for _, name := range s.pullSecrets {
		spec.ImagePullSecrets = append(spec.ImagePullSecrets, corev1.LocalObjectReference{Name: name})
	}
	for _, kv := range []struct {
		flag string
		in   []string
		out  *map[string]string
	}{{"--label", s.labels, &spec.PodLabels}, {"--annotation", s.annotations, &spec.PodAnnotations}} {
		for _, e := range kv.in {
			k, v, ok := strings.Cut(e, "=")
			if !ok || k == "" {
				return fmt.Errorf("%s %q: want KEY=VALUE, e.g. team=vision", kv.flag, e)
			}
			if *kv.out == nil {
				*kv.out = map[string]string{}
			}
			(*kv.out)[k] = v
		}
	}
	return nil
}

// sizeText is the value of --cache-size: checked with the size grammar
// (units.ParseSize) when the flags are parsed, so that a bad one is a usage
// error naming the flag, and kept as typed: the spec stores the user's
// spelling, which the API server checks with the same grammar.
type sizeText string

func (s *sizeText) Set(v string) error {
	if _, err := units.ParseSize(v); err != nil {
		return err
	}
	*s = sizeText(v)
	return nil
}
func (s sizeText) String() string { return string(s) }
func (*sizeText) Type() string    { return "SIZE" }

// shmSize is the value of --shm-size: parseShmSizeFlag when the flags are
// parsed; nil when not given.
type shmSize struct{ q *resource.Quantity }

func (s *shmSize) Set(v string) error {
	q, err := parseShmSizeFlag(v)
	if err != nil {
		return err
	}
	s.q = q
	return nil
}

func (s *shmSize) String() string {
	if s.q == nil {
		return ""
	}
	return s.q.String()
}
func (*shmSize) Type() string { return "SIZE" }

// parseShmSizeFlag parses --shm-size with the sizes' one grammar
// (units.ParseSize: 2Gi, 2GiB, 2G, bytes; 500m and negatives refused), or
// 0 (the container runtime's own /dev/shm). spec.shmSize is a
// resource.Quantity: the size goes there in bytes, in Kubernetes' canonical
// spelling (2GiB becomes 2Gi, 500M stays 500M).
func parseShmSizeFlag(v string) (*resource.Quantity, error) {
	if strings.TrimSpace(v) == "0" {
		return resource.NewQuantity(0, resource.BinarySI), nil
	}
	n, err := units.ParseSize(v)
	if err != nil {
		return nil, fmt.Errorf("%w (or 0 for the container runtime's own /dev/shm)", err)
	}
	format := resource.DecimalSI // 500M stays 500M
	if n%1024 == 0 {
		format = resource.BinarySI // 2GiB becomes 2Gi
	}
	return resource.NewQuantity(n, format), nil
}

// templates reads --worker-template and --ps-template into the spec and,
// when there is one, runs the controller's checks: the API server stores a
// template without looking into it, so a writable dataset mount or a
// volume named as the controller's is refused here, before submitting,
// with the message the job would otherwise fail with.
func (s *submitFlags) templates(tj *v1alpha1.TrainingJob) error {
	for _, t := range []struct {
		flag, file string
		dst        **v1alpha1.ReplicaSpec
	}{{"--worker-template", s.workerTemplate, &tj.Spec.Worker}, {"--ps-template", s.psTemplate, &tj.Spec.PS}} {
		if t.file == "" {
			continue
		}
		b, err := os.ReadFile(t.file)
		if err != nil {
			return fmt.Errorf("%s: %w", t.flag, err)
		}
		rs := &v1alpha1.ReplicaSpec{}
		if err := yaml.UnmarshalStrict(b, &rs.Template); err != nil {
			return fmt.Errorf("%s %s: not a pod template (metadata, spec): %v", t.flag, t.file, err)
		}
		*t.dst = rs
	}
	if tj.Spec.Worker == nil && tj.Spec.PS == nil {
		return nil
	}
	if err := controller.Check(tj); err != nil {
		return fmt.Errorf("the controller would refuse the job: %w", err)
	}
	return nil
}

// parseTolerationFlag parses KEY[=VALUE][:EFFECT]: without a value the
// toleration matches any value (operator Exists), without an effect any
// effect.
func parseTolerationFlag(v string) (corev1.Toleration, error) {
	rest, effect, _ := strings.Cut(v, ":")
	key, value, hasValue := strings.Cut(rest, "=")
	t := corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffect(effect)}
	if hasValue {
		t.Operator, t.Value = corev1.TolerationOpEqual, value
	}
	switch t.Effect {
	case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
	default:
		return t, fmt.Errorf("--toleration %q: effect %q: want NoSchedule, PreferNoSchedule or NoExecute", v, effect)
	}
	if key == "" {
		return t, fmt.Errorf("--toleration %q: want KEY[=VALUE][:EFFECT], e.g. dedicated=ml:NoSchedule", v)
	}
	return t, nil
}

// parseDatasetFlag parses NAME=SOURCE:MOUNTPATH or NAME=claim:PVC:MOUNTPATH.
// The mount path is after the last ":/" (a source URL has "://" and may
// have ":port", never ":/" at its end).
func parseDatasetFlag(v string) (v1alpha1.Dataset, error) {
	usage := fmt.Errorf("--dataset %q: want NAME=SOURCE:MOUNTPATH (e.g. imagenet=s3://bucket/imagenet:/data/imagenet) or NAME=claim:PVC:MOUNTPATH", v)
	name, rest, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return v1alpha1.Dataset{}, usage
	}
	i := strings.LastIndex(rest, ":/")
	if i <= 0 || strings.HasPrefix(rest[i:], "://") {
		return v1alpha1.Dataset{}, usage
	}
	src, mount := rest[:i], rest[i+1:]
	ds := v1alpha1.Dataset{Name: name, MountPath: mount}
	if claim, ok := strings.CutPrefix(src, "claim:"); ok {
		if claim == "" {
			return v1alpha1.Dataset{}, usage
		}
		ds.ExistingClaim = claim
		return ds, nil
	}
	if _, err := source.Parse(src); err != nil {
		return v1alpha1.Dataset{}, fmt.Errorf("--dataset %s: %w", name, err)
	}
	ds.Source = src
	return ds, nil
}

// printSpec prints a TrainingJob that has not been submitted: json and
// yaml without the status and the empty creation timestamp (ready for
// kubectl apply -f), name and wide as for a submitted one.
func printSpec(w io.Writer, now time.Time, tj *v1alpha1.TrainingJob, format string) error {
	if format != outJSON && format != outYAML {
		return printJobs(w, now, format, "", false, false, tj)
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(forOutput(tj))
	if err != nil {
		return err
	}
	delete(m, "status")
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	return cliprint.Print(w, format, cliprint.Output{Value: m})
}

// parseReadaheadFilesFlag parses --readahead-files: volattr.ReadaheadFilesAuto
// leaves the datasets' readaheadFiles unset (the node's default), a number
// from 0 to volattr.MaxReadaheadFiles sets it.
func parseReadaheadFilesFlag(v string) (*int32, error) {
	if v == volattr.ReadaheadFilesAuto {
		return nil, nil
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n < 0 || n > volattr.MaxReadaheadFiles {
		return nil, fmt.Errorf("--readahead-files: %q is neither %q nor a number of files from 0 to %d", v, volattr.ReadaheadFilesAuto, volattr.MaxReadaheadFiles)
	}
	r := int32(n)
	return &r, nil
}

// setAuthor sets the annotations jobs.epochfs.io/author and author-groups of
// a job that names a Secret to the caller's user name and groups, as the API
// server says they are (a SelfSubjectReview): the admission policy admits
// no other, and the controller puts the Secret in a volume only if that
// user, with those groups, may get it.
func setAuthor(ctx context.Context, c client.Client, tj *v1alpha1.TrainingJob) error {
	if !slices.ContainsFunc(tj.Spec.Datasets, func(d v1alpha1.Dataset) bool { return d.SecretName != "" }) {
		return nil
	}
	ssr := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, ssr); err != nil {
		return fmt.Errorf("who am I (SelfSubjectReview, for the %s annotation a job with --dataset-secret needs): %w", v1alpha1.AnnotationAuthor, err)
	}
	if tj.Annotations == nil {
		tj.Annotations = map[string]string{}
	}
	tj.Annotations[v1alpha1.AnnotationAuthor] = ssr.Status.UserInfo.Username
	if g := ssr.Status.UserInfo.Groups; len(g) > 0 {
		tj.Annotations[v1alpha1.AnnotationAuthorGroups] = strings.Join(g, ",")
	}
	return nil
}
