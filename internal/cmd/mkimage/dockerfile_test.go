package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDockerfileSameRecipe keeps the Dockerfile the recipe `make images`
// runs (there is no Docker here to build it and compare the file lists):
// the same root filesystem script, the same binaries built with the same
// flags into /usr/local/bin, the same command, working directory, PATH and
// labels.
func TestDockerfileSameRecipe(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", "..", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	dockerfile, imagesMk := read("Dockerfile"), read("mk/images.mk")
	// Instructions, with continuation lines joined and comments dropped.
	var lines []string
	for _, l := range strings.Split(strings.ReplaceAll(dockerfile, "\\\n", " "), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, strings.Join(strings.Fields(l), " "))
		}
	}
	has := func(what, want string) {
		t.Helper()
		for _, l := range lines {
			if strings.Contains(l, want) {
				return
			}
		}
		t.Errorf("Dockerfile: %s: no instruction contains %q", what, want)
	}

	has("root filesystem", "RUN bash /image-rootfs.sh /rootfs.tar")
	has("root filesystem", "COPY scripts/image-rootfs.sh /image-rootfs.sh")
	has("root filesystem as the base", "COPY --from=rootfs /rootfs/ /")
	has("base", "FROM scratch")

	m := regexp.MustCompile(`(?m)^IMAGE_LDFLAGS\s*:=\s*(.*)$`).FindStringSubmatch(imagesMk)
	if m == nil {
		t.Fatal("mk/images.mk: no IMAGE_LDFLAGS")
	}
	ldflags := strings.ReplaceAll(strings.TrimSpace(m[1]), "$(VERSION)", "${VERSION}")
	has("go build flags", `go build -trimpath -ldflags "`+ldflags+`"`)
	has("static binaries", "CGO_ENABLED=0")

	// Every binary is static but cachefs, which links libcephfs (cgo, the
	// ceph build tags of mk/ceph.mk) so that the image serves cephfs://.
	tags := regexp.MustCompile(`(?m)^CEPH_TAGS\s*:=\s*(.*)$`).FindStringSubmatch(read("mk/ceph.mk"))
	if tags == nil {
		t.Fatal("mk/ceph.mk: no CEPH_TAGS")
	}
	var pkgs, outs []string
	for _, b := range binaries {
		outs = append(outs, "/out/"+b)
		if b != "cachefs" {
			pkgs = append(pkgs, "./cmd/"+b)
		}
	}
	has("static binaries built", `go build -trimpath -ldflags "`+ldflags+`" -o /out/ `+strings.Join(pkgs, " "))
	has("cachefs built with libcephfs", `CGO_ENABLED=1 go build -trimpath -tags `+strings.TrimSpace(tags[1])+` -ldflags "`+ldflags+`" -o /out/ ./cmd/cachefs`)
	if !strings.Contains(imagesMk, "-tags $(CEPH_TAGS)") || !strings.Contains(imagesMk, "filter-out cachefs") {
		t.Error("mk/images.mk no longer builds cachefs alone with $(CEPH_TAGS): change this test and the Dockerfile with it")
	}
	has("binaries copied", "COPY --from=build "+strings.Join(outs, " ")+" /usr/local/bin/")

	cfg := epochfsConfig("${VERSION}")
	cmd, _ := json.Marshal(cfg.Cmd)
	has("command", "CMD "+strings.ReplaceAll(string(cmd), `","`, `", "`))
	has("working directory", "WORKDIR "+cfg.WorkingDir)
	has("PATH", "ENV "+strings.Join(cfg.Env, " "))
	has("labels", fmt.Sprintf("LABEL org.opencontainers.image.title=%s org.opencontainers.image.version=%s",
		cfg.Labels["org.opencontainers.image.title"], cfg.Labels["org.opencontainers.image.version"]))
	if len(cfg.Labels) != 2 {
		t.Errorf("labels %v: check them here", cfg.Labels)
	}
	if strings.Contains(dockerfile, "ENTRYPOINT") || strings.Contains(dockerfile, "USER ") {
		t.Error("Dockerfile sets ENTRYPOINT or USER; the images of `make images` set neither")
	}
}
