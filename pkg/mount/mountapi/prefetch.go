package mountapi

// PrefetchProgress and PrefetchSummary are what a prefetch reports: the
// types of pkg/prefetch (Progress and Summary are aliases of them) and of
// the control socket's events alike, so that they need no conversion. They
// are defined here because this package is a leaf (see the package doc).

// States of a PrefetchSummary.
const (
	// StateComplete: every file of the dataset is cached.
	StateComplete = "complete"
	// StateCacheFull: everything that fits is cached; the rest did not fit.
	StateCacheFull = "cache-full"
	// StateInterrupted: the context ended before the plan was done.
	StateInterrupted = "interrupted"
	// StateFailed: some files could not be read or cached (see Errors).
	StateFailed = "failed"
)

// PrefetchProgress is a snapshot of a running prefetch. Byte and file
// counts of the dataset are final once Phase is past listing.
type PrefetchProgress struct {
	Phase        string `json:"phase"`
	DatasetFiles int64  `json:"dataset_files"` // while listing: found so far
	DatasetBytes int64  `json:"dataset_bytes"`
	ListedDirs   int64  `json:"listed_dirs"`
	// Already: entries held before this run (files whose every entry is).
	AlreadyFiles int64 `json:"already_files"`
	AlreadyBytes int64 `json:"already_bytes"`
	// Planned: entries this run set out to fetch (they fit).
	PlannedFiles int64 `json:"planned_files"`
	PlannedBytes int64 `json:"planned_bytes"`
	// Done: planned entries handled so far, cached or not.
	DoneFiles int64 `json:"done_files"`
	DoneBytes int64 `json:"done_bytes"`
	// Fetched: bytes read and cached by this run so far.
	FetchedBytes int64 `json:"fetched_bytes"`
	FailedFiles  int64 `json:"failed_files"`
	// ElapsedSeconds since the prefetch started; BytesPerSecond and
	// ETASeconds are about the fetch phase (ETASeconds is -1 when unknown).
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	BytesPerSecond float64 `json:"bytes_per_second"`
	ETASeconds     float64 `json:"eta_seconds"`
}

// PrefetchSummary is the outcome of a prefetch, computed from the store at
// the end.
type PrefetchSummary struct {
	State   string `json:"state"`   // one of the State constants
	Message string `json:"message"` // one line for people, e.g. "cache full at 49.9% of the dataset: …"
	Dataset string `json:"dataset"` // the backend ID (the cache keys' dataset)
	// Manifest tells whether the files came from a manifest (else a walk).
	Manifest bool `json:"manifest"`

	// The dataset (zero when a run was interrupted while listing).
	Files int64 `json:"files"`
	Bytes int64 `json:"bytes"`
	// Cached in total now: files whose every entry is held, and the bytes of
	// every held entry (a partly cached large file counts its held blocks).
	CachedFiles int64 `json:"cached_files"`
	CachedBytes int64 `json:"cached_bytes"`
	// PercentBytes = 100 × CachedBytes / Bytes, rounded down to 0.1 (an
	// empty dataset is 100); PercentFiles likewise.
	PercentBytes float64 `json:"percent_bytes"`
	PercentFiles float64 `json:"percent_files"`
	// Already cached before this run.
	AlreadyFiles int64 `json:"already_files"`
	AlreadyBytes int64 `json:"already_bytes"`
	// Cached by this run: files now complete that were not before and of
	// which this run admitted at least one entry (a concurrent reader of the
	// same store may have admitted others), and the bytes this run read and
	// admitted.
	FetchedFiles int64 `json:"fetched_files"`
	FetchedBytes int64 `json:"fetched_bytes"`
	// Files (and bytes of entries) that are not cached because they did not
	// fit.
	NotFitFiles int64 `json:"not_fit_files"`
	NotFitBytes int64 `json:"not_fit_bytes"`
	// Files that could not be read or written, with the first errors.
	FailedFiles int64    `json:"failed_files"`
	Errors      []string `json:"errors,omitempty"`

	CapacityBytes  int64   `json:"capacity_bytes"`
	UsedBytes      int64   `json:"used_bytes"`
	WholeFileMax   int64   `json:"whole_file_max"`
	BlockSize      int64   `json:"block_size"`
	Workers        int     `json:"workers"`
	ElapsedSeconds float64 `json:"elapsed_seconds"`
}
