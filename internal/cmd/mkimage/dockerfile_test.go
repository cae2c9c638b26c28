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

	var pkgs, outs []string
	for _, b := range binaries {
		pkgs = append(pkgs, "./cmd/"+b)
		outs = append(outs, "/out/"+b)
	}
	has("binaries built", strings.Join(pkgs, " "))
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
