package cluster

// TFConfig is TF_CONFIG as TensorFlow's TFConfigClusterResolver reads it:
// decode it with unknown fields disallowed to read a pod's environment as
// TensorFlow would (the job controller's tests and the end-to-end tests).
type TFConfig struct {
	Cluster map[string][]string `json:"cluster"`
	Task    struct {
		Type  string `json:"type"`
		Index *int   `json:"index"`
	} `json:"task"`
	Environment string `json:"environment"`
}
