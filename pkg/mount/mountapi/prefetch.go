package mountapi

// PrefetchProgress and PrefetchSummary are pkg/prefetch's Progress and
// Summary as they travel over the control socket. The fields are the same,
// in the same order, so that pkg/mount converts one into the other
// (PrefetchSummary(sum)): a field added on one side only fails its build.

// States of a PrefetchSummary (pkg/prefetch's State constants).
const (
	StateComplete    = "complete"
	StateCacheFull   = "cache-full"
	StateInterrupted = "interrupted"
	StateFailed      = "failed"
)

// PrefetchProgress is a running prefetch's progress (prefetch.Progress).
type PrefetchProgress struct {
	Phase          string  `json:"phase"`
	DatasetFiles   int64   `json:"dataset_files"`
	DatasetBytes   int64   `json:"dataset_bytes"`
	ListedDirs     int64   `json:"listed_dirs"`
	AlreadyFiles   int64   `json:"already_files"`
	AlreadyBytes   int64   `json:"already_bytes"`
	PlannedFiles   int64   `json:"planned_files"`
	PlannedBytes   int64   `json:"planned_bytes"`
	DoneFiles      int64   `json:"done_files"`
	DoneBytes      int64   `json:"done_bytes"`
	FetchedBytes   int64   `json:"fetched_bytes"`
	FailedFiles    int64   `json:"failed_files"`
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	BytesPerSecond float64 `json:"bytes_per_second"`
	ETASeconds     float64 `json:"eta_seconds"`
}

// PrefetchSummary is a prefetch's outcome (prefetch.Summary, which
// documents each field).
type PrefetchSummary struct {
	State          string   `json:"state"`
	Message        string   `json:"message"`
	Dataset        string   `json:"dataset"`
	Manifest       bool     `json:"manifest"`
	Files          int64    `json:"files"`
	Bytes          int64    `json:"bytes"`
	CachedFiles    int64    `json:"cached_files"`
	CachedBytes    int64    `json:"cached_bytes"`
	PercentBytes   float64  `json:"percent_bytes"`
	PercentFiles   float64  `json:"percent_files"`
	AlreadyFiles   int64    `json:"already_files"`
	AlreadyBytes   int64    `json:"already_bytes"`
	FetchedFiles   int64    `json:"fetched_files"`
	FetchedBytes   int64    `json:"fetched_bytes"`
	NotFitFiles    int64    `json:"not_fit_files"`
	NotFitBytes    int64    `json:"not_fit_bytes"`
	FailedFiles    int64    `json:"failed_files"`
	Errors         []string `json:"errors,omitempty"`
	CapacityBytes  int64    `json:"capacity_bytes"`
	UsedBytes      int64    `json:"used_bytes"`
	WholeFileMax   int64    `json:"whole_file_max"`
	BlockSize      int64    `json:"block_size"`
	Workers        int      `json:"workers"`
	ElapsedSeconds float64  `json:"elapsed_seconds"`
}
