// Package archtest holds tests of the repository's shape rather than of its behaviour: the size rule for
// files and functions in pkg/ and cmd/, that docs/DESIGN.md's layout block names every package and
// top-level folder, and what each binary and test binary may link (go list -deps). `make lint` runs it.
//
// It must not import any package of the project: it reads the source tree as files (go/parser, go list)
// and depends on nothing it checks.
package archtest
