package kube

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/epochfs/epochfs/internal/testenv"
)

// DocExample returns the YAML of the example of kind named name in the
// repository's doc file (e.g. "docs/JOB.md"): a ```yaml block whose kind
// and metadata.name are those. Tests run the examples a doc shows, so the
// doc cannot drift from what works.
func DocExample(t testing.TB, file, kind, name string) []byte {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	const fence = "```yaml\n"
	rest := string(doc)
	for {
		var ok bool
		if _, rest, ok = strings.Cut(rest, fence); !ok {
			t.Fatalf("%s has no %s example named %s", file, kind, name)
		}
		body, _, _ := strings.Cut(rest, "```")
		var head struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(body), &head); err != nil {
			continue // not an object (a values file, a fragment)
		}
		if head.Kind == kind && head.Metadata.Name == name {
			return []byte(body)
		}
	}
}
