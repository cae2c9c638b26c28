package manifest

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zeebo/xxh3"
)

var created = time.Date(2026, 11, 23, 10, 0, 0, 123, time.UTC)

func sampleFiles() []File {
	return []File{
		{Path: "train/n01/img_0001.jpg", Size: 1234, Version: "1700000000123456789-1234"},
		{Path: "train/n01/img_0002.jpg", Size: 0, Version: "d41d8cd98f00b204e9800998ecf8427e"},
		{Path: "train/n02/a b ü.jpg", Size: 99, Version: "9b2cf535f27731c974343645a3985328-12"},
		{Path: "train/n02/a", Size: 1, Version: "weird \"etag\""},
		{Path: "train/n02/a.b", Size: 2, Version: ""},
		{Path: "train/n1/x", Size: 3, Version: "0123-3"}, // not canonical posix: raw
		{Path: "train/n1/y", Size: 4, Version: "-5-4"},   // negative: raw
		{Path: "train/n1/z", Size: 5, Version: "ABCDEF"}, // upper-case hex: raw
		{Path: "train/n1/w", Size: 6, Version: "abc"},    // odd hex: raw
		{Path: "train/n1/v", Size: 7, Version: "-100-7"}, // raw
		{Path: "train/n1/u", Size: 1 << 40, Version: "5-1099511627776"},
		// posix with ctime and inode: as written, as extracted from an
		// archive (ctime years after mtime), ctime before mtime, inode 0
		// and the largest inode, and shapes that are stored raw.
		{Path: "train/n1/ci-new", Size: 100, Version: "1700000000123456789-100-1700000000123456789-42"},
		{Path: "train/n1/ci-tar", Size: 5, Version: "1300000000000000000-5-1764000000000000000-18446744073709551615"},
		{Path: "train/n1/ci-before", Size: 6, Version: "1700000000000000000-6-1600000000000000000-0"},
		{Path: "train/n1/ci-zero", Size: 0, Version: "0-0-0-0"},
		{Path: "train/n1/ci-nc", Size: 7, Version: "1-7-02-3"},                      // non-canonical ctime: raw
		{Path: "train/n1/ci-size", Size: 8, Version: "1-9-2-3"},                     // size disagrees: raw
		{Path: "train/n1/ci-neg", Size: 9, Version: "-1-9-2-3"},                     // negative mtime: raw
		{Path: "train/n1/ci-five", Size: 10, Version: "1-10-2-3-4"},                 // five fields: raw
		{Path: "train/n1/ci-big", Size: 11, Version: "1-11-2-18446744073709551616"}, // inode overflows: raw
		{Path: "val/0.jpg", Size: 10, Version: "abcd-007"},                          // non-canonical N: raw
		{Path: "top.txt", Size: 11, Version: "aa-0"},
		{Path: strings.Repeat("d", 255) + "/" + strings.Repeat("f", 255), Size: 12, Version: "x"},
	}
}

func mustBuild(t testing.TB, files []File, opts BuildOptions) *Manifest {
	t.Helper()
	if opts.Info.Created.IsZero() {
		opts.Info.Created = created
	}
	if opts.Info.Source == "" {
		opts.Info.Source = "file:///data/set"
	}
	m, skipped, err := Build(files, opts)
	if err != nil {
		t.Fatal(err)
	}
	if skipped != 0 {
		t.Fatalf("skipped %d", skipped)
	}
	return m
}

func mustEncode(t testing.TB, m *Manifest) []byte {
	t.Helper()
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkSame asserts that m holds exactly files (and the dirs).
func checkSame(t *testing.T, m *Manifest, files []File, dirs []string) {
	t.Helper()
	want := map[string]File{}
	for _, f := range files {
		want[f.Path] = f
	}
	seen := 0
	var order []string
	m.Walk(func(i int, p string) bool {
		seen++
		order = append(order, p)
		f, ok := want[p]
		if !ok {
			t.Errorf("unexpected file %q", p)
			return true
		}
		if m.Size(i) != f.Size || m.Version(i) != f.Version || !bytes.Equal(m.Checksum(i), f.Sum) {
			t.Errorf("%q: size %d version %q sum %x, want %d %q %x", p, m.Size(i), m.Version(i), m.Checksum(i), f.Size, f.Version, f.Sum)
		}
		if m.Path(i) != p {
			t.Errorf("Path(%d) = %q, want %q", i, m.Path(i), p)
		}
		if j, ok := m.Find(p); !ok || j != i {
			t.Errorf("Find(%q) = %d %v, want %d", p, j, ok, i)
		}
		e := m.Entry(i)
		if e.IsDir || e.Size != f.Size || e.Version != f.Version || !strings.HasSuffix(p, e.Name) {
			t.Errorf("Entry(%d) = %+v", i, e)
		}
		return true
	})
	if seen != len(files) || m.Files() != len(files) {
		t.Errorf("walked %d files, Files() = %d, want %d", seen, m.Files(), len(files))
	}
	if !slices.IsSortedFunc(order, comparePaths) {
		t.Errorf("Walk order is not path order: %q", order)
	}
	for _, d := range dirs {
		if i, ok := m.Find(d); !ok || !m.IsDir(i) {
			t.Errorf("directory %q missing", d)
		}
	}
	// Every directory's children are sorted and point back to it.
	for i := range m.Len() {
		if !m.IsDir(i) {
			continue
		}
		start, end := m.Children(i)
		for c := start; c < end; c++ {
			if m.Parent(c) != i {
				t.Errorf("Parent(%d) = %d, want %d", c, m.Parent(c), i)
			}
			if c > start && m.Name(c-1) >= m.Name(c) {
				t.Errorf("children of %q not sorted: %q, %q", m.Path(i), m.Name(c-1), m.Name(c))
			}
		}
	}
	var total int64
	for _, f := range files {
		total += f.Size
	}
	if m.TotalBytes() != total {
		t.Errorf("TotalBytes %d, want %d", m.TotalBytes(), total)
	}
}

func TestRoundTrip(t *testing.T) {
	files := sampleFiles()
	dirs := []string{"empty", "train/n03/deeper"}
	for _, sums := range []bool{false, true} {
		t.Run(fmt.Sprintf("checksums=%v", sums), func(t *testing.T) {
			fs := slices.Clone(files)
			if sums {
				for i := range fs {
					s := sha256.Sum256([]byte(fs[i].Path))
					fs[i].Sum = s[:]
				}
			}
			m := mustBuild(t, fs, BuildOptions{Info: Info{Checksums: sums}, Dirs: dirs})
			checkSame(t, m, fs, dirs)
			data := mustEncode(t, m)
			m2, err := Load(data)
			if err != nil {
				t.Fatal(err)
			}
			checkSame(t, m2, fs, dirs)
			if info := m2.Info(); info.Source != "file:///data/set" || !info.Created.Equal(created) || info.Checksums != sums {
				t.Errorf("info %+v", info)
			}
			if m2.Dirs() != m.Dirs() || m2.Dirs() != 10 { // root; train, val, empty, ddd…; n01, n02, n1, n03; deeper
				t.Errorf("Dirs %d / %d", m2.Dirs(), m.Dirs())
			}
			if again := mustEncode(t, m2); !bytes.Equal(again, data) {
				t.Error("Encode(Load(b)) != b")
			}
			if i, ok := m2.Find("empty"); !ok || !m2.IsDir(i) {
				t.Error("empty directory lost")
			} else if s, e := m2.Children(i); s != e {
				t.Error("empty directory has children")
			}
			for _, p := range []string{"nope", "train/n01/img_0003.jpg", "train/n01/img_0001.jpg/x", "train/n0"} {
				if _, ok := m2.Find(p); ok {
					t.Errorf("Find(%q) found something", p)
				}
			}
		})
	}
}

func TestEmptyManifest(t *testing.T) {
	m := mustBuild(t, nil, BuildOptions{})
	m2, err := Load(mustEncode(t, m))
	if err != nil {
		t.Fatal(err)
	}
	if m2.Files() != 0 || m2.Dirs() != 1 || m2.Len() != 1 || !m2.IsDir(Root) || m2.Path(Root) != "" {
		t.Errorf("empty manifest: files %d dirs %d len %d", m2.Files(), m2.Dirs(), m2.Len())
	}
}

func TestBuildSkips(t *testing.T) {
	good := File{Path: "ok/file", Size: 1, Version: "v"}
	cases := []struct {
		name string
		f    File
	}{
		{"dotdot", File{Path: "../etc/passwd"}},
		{"inner dotdot", File{Path: "a/../b"}},
		{"absolute", File{Path: "/etc/passwd"}},
		{"empty", File{Path: ""}},
		{"trailing slash", File{Path: "a/"}},
		{"double slash", File{Path: "a//b"}},
		{"dot", File{Path: "./a"}},
		{"NUL", File{Path: "a\x00b"}},
		{"control", File{Path: "a\nb"}},
		{"DEL", File{Path: "a\x7fb"}},
		{"invalid UTF-8", File{Path: "a\xffb"}},
		{"long name", File{Path: strings.Repeat("n", 256)}},
		{"long path", File{Path: strings.Repeat(strings.Repeat("n", 200)+"/", 21) + "f"}},
		{"negative size", File{Path: "neg", Size: -1}},
		{"control in version", File{Path: "v", Version: "a\r\nX-Evil: 1"}},
		{"long version", File{Path: "v2", Version: strings.Repeat("v", MaxVersionLen+1)}},
		{"short sum", File{Path: "s", Sum: []byte{1, 2}}},
		{"duplicate", good},
		{"under a file", File{Path: "ok/file/inner"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, skipped, err := Build([]File{good, tc.f}, BuildOptions{Info: Info{Source: "s"}})
			if err != nil {
				t.Fatal(err)
			}
			if skipped != 1 || m.Files() != 1 {
				t.Fatalf("skipped %d, files %d; want 1, 1", skipped, m.Files())
			}
			if _, ok := m.Find("ok/file"); !ok {
				t.Error("the good file is gone")
			}
		})
	}
	t.Run("missing sum with checksums", func(t *testing.T) {
		s := sha256.Sum256(nil)
		_, skipped, err := Build([]File{{Path: "a", Sum: s[:]}, {Path: "b"}}, BuildOptions{Info: Info{Checksums: true}})
		if err != nil || skipped != 1 {
			t.Fatalf("skipped %d, %v", skipped, err)
		}
	})
	t.Run("dir named like a file", func(t *testing.T) {
		m, skipped, err := Build([]File{good}, BuildOptions{Dirs: []string{"ok/file", "../x", "fine"}})
		if err != nil || skipped != 2 {
			t.Fatalf("skipped %d, %v", skipped, err)
		}
		if i, ok := m.Find("ok/file"); !ok || m.IsDir(i) {
			t.Error("the file must win over the directory")
		}
	})
	t.Run("bad source", func(t *testing.T) {
		if _, _, err := Build(nil, BuildOptions{Info: Info{Source: "a\x00"}}); err == nil {
			t.Error("a source ID with NUL was accepted")
		}
	})
}

// seal wraps a raw body in a valid envelope (header, zstd, checksum), so
// that tests reach the body parser.
func seal(t testing.TB, h header, body []byte) []byte {
	t.Helper()
	data, err := encode(max(h.format, 1), Info{Source: h.source, Created: time.Unix(0, h.created), Checksums: h.flags&flagChecksums != 0},
		h.files, h.dirs, h.bytes, body)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// reseal recomputes the trailing checksum of data.
func reseal(data []byte) []byte {
	out := slices.Clone(data)
	if len(out) < trailerLen {
		return out
	}
	sum := xxh3.Hash128(out[:len(out)-trailerLen]).Bytes()
	copy(out[len(out)-trailerLen:], sum[:])
	return out
}

// rawBody builds a body by hand: records of (name, tag+payload, size).
type rec struct {
	shared int
	name   string
	ver    []byte // nil: directory
	size   uint64
}

func rawBody(dirs ...[]rec) []byte {
	var b []byte
	for _, d := range dirs {
		b = binary.AppendUvarint(b, uint64(len(d)))
		for _, r := range d {
			b = binary.AppendUvarint(b, uint64(r.shared))
			b = binary.AppendUvarint(b, uint64(len(r.name)))
			b = append(b, r.name...)
			if r.ver == nil {
				b = append(b, tagDir)
				continue
			}
			b = append(b, r.ver...)
			b = binary.AppendUvarint(b, r.size)
		}
	}
	return b
}

var rawV = []byte{tagRaw, 1, 'v'}

func TestLoadCorrupt(t *testing.T) {
	m := mustBuild(t, sampleFiles(), BuildOptions{})
	good := mustEncode(t, m)
	hdr := func(files, dirs, bytes uint64) header {
		return header{files: files, dirs: dirs, bytes: bytes, source: "s"}
	}
	cases := []struct {
		name string
		data []byte
		want string // substring of the error
	}{
		{"empty", nil, "truncated"},
		{"short", good[:10], "truncated"},
		{"bad magic", append([]byte("NOTAMANI"), good[8:]...), "bad magic"},
		{"gzip", []byte("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + strings.Repeat("x", 40)), "bad magic"},
		{"flipped body byte", func() []byte { b := slices.Clone(good); b[len(b)/2] ^= 1; return b }(), "checksum mismatch"},
		{"flipped checksum", func() []byte { b := slices.Clone(good); b[len(b)-1] ^= 1; return b }(), "checksum mismatch"},
		{"unknown flags", reseal(func() []byte { b := slices.Clone(good); b[11] = 0x80; return b }()), "unknown flags"},
		{"trailing garbage", append(slices.Clone(good), 0), "checksum mismatch"},
		{"resealed trailing garbage", reseal(append(good[:len(good)-trailerLen:len(good)-trailerLen], 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)), "body is"},
		{"no root", seal(t, hdr(0, 0, 0), rawBody(nil)), "no root"},
		{"too many entries", seal(t, hdr(1<<40, 1, 0), rawBody(nil)), "exceed the limit"},
		{"entries cannot fit", seal(t, hdr(1000, 1, 0), rawBody(nil)), "cannot fit"},
		{"checksums cannot fit", seal(t, header{files: 3, dirs: 1, flags: flagChecksums}, rawBody([]rec{{name: "a", ver: rawV}, {name: "b", ver: rawV}, {name: "c", ver: rawV}})), "checksums cannot fit"},
		{"fewer files than header", seal(t, hdr(2, 1, 0), rawBody([]rec{{name: "a", ver: rawV}, {name: "b", ver: rawV}})[:1]), "body"},
		{"count mismatch", seal(t, hdr(1, 1, 0), rawBody([]rec{})), "cannot fit"},
		{"count mismatch 2", seal(t, hdr(1, 2, 0), rawBody([]rec{{name: "a", ver: rawV}, {name: "bb", ver: rawV}})), "header says 1 and 2"},
		{"bytes mismatch", seal(t, hdr(1, 1, 5), rawBody([]rec{{name: "a", ver: rawV, size: 4}})), "header says 5"},
		{"unsorted", seal(t, hdr(2, 1, 0), rawBody([]rec{{name: "b", ver: rawV}, {name: "a", ver: rawV}})), "not sorted"},
		{"duplicate", seal(t, hdr(2, 1, 0), rawBody([]rec{{name: "a", ver: rawV}, {name: "a", ver: rawV}})), "not sorted"},
		{"dotdot", seal(t, hdr(1, 1, 0), rawBody([]rec{{name: "..", ver: rawV}})), "invalid name"},
		{"slash", seal(t, hdr(1, 1, 0), rawBody([]rec{{name: "a/b", ver: rawV}})), "invalid name"},
		{"NUL", seal(t, hdr(1, 1, 0), rawBody([]rec{{name: "a\x00", ver: rawV}})), "invalid name"},
		{"control", seal(t, hdr(1, 1, 0), rawBody([]rec{{name: "a\n", ver: rawV}})), "invalid name"},
		{"empty name", seal(t, hdr(1, 1, 0), rawBody([]rec{{name: "", ver: rawV}, {name: "zz", ver: rawV}})[:1]), "body"},
		{"long name", seal(t, hdr(1, 1, 0), rawBody([]rec{{name: strings.Repeat("a", 256), ver: rawV}})), "bad name lengths"},
		{"shared beyond previous", seal(t, hdr(2, 1, 0), rawBody([]rec{{name: "a", ver: rawV}, {shared: 5, name: "b", ver: rawV}})), "bad name lengths"},
		{"bad version tag", seal(t, hdr(1, 1, 0), rawBody([]rec{{name: "a", ver: []byte{9}}})), "bad version"},
		{"raw version with CR", seal(t, hdr(1, 1, 0), rawBody([]rec{{name: "a", ver: []byte{tagRaw, 2, '\r', '\n'}}})), "bad version"},
		{"raw version too long", seal(t, hdr(1, 1, 0), rawBody([]rec{{name: "a", ver: append([]byte{tagRaw, 0x81, 0x08}, make([]byte, 1025)...)}})), "bad version"},
		{"hex version of 0 bytes", seal(t, hdr(1, 1, 0), rawBody([]rec{{name: "a", ver: []byte{tagHex, 0}}})), "bad version"},
		{"hex version too long", seal(t, hdr(1, 1, 0), rawBody([]rec{{name: "a", ver: append([]byte{tagHex, 65}, make([]byte, 65)...)}})), "bad version"},
		{"posix ctime version in format 1", seal(t, hdr(1, 1, 0), rawBody([]rec{{name: "a", ver: []byte{tagPosixCI, 2, 0, 7}}})), "format version 1"},
		{"posix ctime version truncated", seal(t, header{format: 2, files: 1, dirs: 1, source: "s"}, rawBody([]rec{{name: "a", ver: []byte{tagPosixCI, 2}}})), "bad version"},
		{"posix ctime overflows", seal(t, header{format: 2, files: 1, dirs: 1, source: "s"},
			rawBody([]rec{{name: "a", ver: binary.AppendUvarint(binary.AppendVarint(binary.AppendVarint([]byte{tagPosixCI}, math.MaxInt64), 1), 0)}})), "bad version"},
		{"huge size", seal(t, hdr(1, 1, 0), rawBody([]rec{{name: "a", ver: rawV, size: 1 << 63}})), "bad size"},
		{"more dirs than header", seal(t, hdr(0, 1, 0), rawBody([]rec{{name: "d"}})), "more entries"},
		{"dir record missing", seal(t, hdr(0, 2, 0), rawBody([]rec{{name: "d"}})), "directory 1"},
		{"trailing body bytes", seal(t, hdr(0, 1, 0), append(rawBody([]rec{}), 0)), "trailing"},
		{"deep path", func() []byte {
			var recs [][]rec
			for range 20 {
				recs = append(recs, []rec{{name: strings.Repeat("d", 250)}})
			}
			recs = append(recs, nil)
			return seal(t, hdr(0, 21, 0), rawBody(recs...))
		}(), "path of"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Load(tc.data)
			if err == nil {
				t.Fatalf("loaded %d files from a corrupt manifest", m.Files())
			}
			if m != nil {
				t.Error("a non-nil manifest with an error")
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("error %v does not wrap ErrCorrupt", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
	t.Run("newer version", func(t *testing.T) {
		b := slices.Clone(good)
		b[8] = FormatVersion + 1
		if _, err := Load(reseal(b)); !errors.Is(err, ErrUnsupported) {
			t.Errorf("got %v, want ErrUnsupported", err)
		}
	})
}

// TestEveryTruncationAndFlip: each prefix and each single-bit flip of a
// manifest is an error, never a panic or a partial manifest.
func TestEveryTruncationAndFlip(t *testing.T) {
	good := mustEncode(t, mustBuild(t, sampleFiles(), BuildOptions{}))
	for n := range len(good) {
		if m, err := Load(good[:n]); err == nil || m != nil || !errors.Is(err, ErrCorrupt) {
			t.Fatalf("prefix of %d bytes: %v", n, err)
		}
	}
	for i := range len(good) {
		b := slices.Clone(good)
		b[i] ^= 0x10
		if _, err := Load(b); err == nil {
			t.Fatalf("flip at %d loaded", i)
		}
		// With the checksum recomputed the body parser must still hold.
		_, _ = Load(reseal(b))
	}
}

func TestDecompressionBomb(t *testing.T) {
	body := make([]byte, 1<<20) // compresses to almost nothing
	data := seal(t, header{files: 0, dirs: 1, source: "s"}, body)
	_, err := Load(data)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "compressed bytes") {
		t.Errorf("got %v, want a ratio error", err)
	}
}

func TestDiff(t *testing.T) {
	old := mustBuild(t, []File{
		{Path: "a", Size: 1, Version: "v1"},
		{Path: "b", Size: 2, Version: "v2"},
		{Path: "c", Size: 3, Version: "v3"},
		{Path: "d/e", Size: 4, Version: "v4"},
	}, BuildOptions{})
	cur := mustBuild(t, []File{
		{Path: "a", Size: 1, Version: "v1"},
		{Path: "b", Size: 5, Version: "v2"},
		{Path: "c", Size: 3, Version: "v9"},
		{Path: "d/e/f", Size: 4, Version: "v4"},
		{Path: "n", Size: 1, Version: "v"},
	}, BuildOptions{})
	d := Diff(old, cur)
	if !slices.Equal(d.Missing, []string{"d/e"}) || !slices.Equal(d.New, []string{"d/e/f", "n"}) || len(d.Changed) != 2 ||
		d.Changed[0].Path != "b" || d.Changed[1].Path != "c" || d.Empty() {
		t.Errorf("drift %+v", d)
	}
	if !Diff(old, old).Empty() {
		t.Error("a manifest drifts from itself")
	}
}

func TestComparePaths(t *testing.T) {
	in := []string{"a.b", "a/x", "a", "a/x/y", "a-", "b", "a/", "ab"}
	slices.SortFunc(in, comparePaths)
	want := []string{"a", "a/", "a/x", "a/x/y", "a-", "a.b", "ab", "b"}
	if !slices.Equal(in, want) {
		t.Errorf("got %q, want %q", in, want)
	}
}

// TestPosixVersionEncoding: posix versions with ctime and inode take tag 5
// (varint mtime, varint ctime − mtime, uvarint inode) and make Encode write
// format version 2; a manifest without them stays version 1, which older
// builds read; both load, and old posix versions are counted.
func TestPosixVersionEncoding(t *testing.T) {
	cases := []struct {
		v    string
		size int64
		tag  byte
		len  int // tag + payload bytes
	}{
		{"1700000000123456789-100-1700000000123456789-42", 100, tagPosixCI, 1 + 9 + 1 + 1},      // as written: ctime = mtime
		{"1700000000123456789-100-1700000000123999999-9000000", 100, tagPosixCI, 1 + 9 + 3 + 4}, // renamed into place
		{"1300000000000000000-5-1764000000000000000-18446744073709551615", 5, tagPosixCI, 1 + 9 + 9 + 10},
		{"1700000000000000000-6-1600000000000000000-0", 6, tagPosixCI, 1 + 9 + 9 + 1},
		{"1700000000123456789-100", 100, tagPosix, 1 + 9},
		{"1-7-02-3", 7, tagRaw, 1 + 1 + 8},
		{"1-9-2-3", 8, tagRaw, 1 + 1 + 7},
	}
	for _, tc := range cases {
		enc := appendVersion(nil, tc.v, tc.size)
		if enc[0] != tc.tag || len(enc) != tc.len {
			t.Errorf("%q: tag %d, %d bytes; want tag %d, %d bytes", tc.v, enc[0], len(enc), tc.tag, tc.len)
		}
		if n, err := readVersion(enc[0], enc[1:]); err != nil || n != len(enc)-1 {
			t.Errorf("%q: readVersion = %d, %v", tc.v, n, err)
		}
		if got := formatVersion(enc, tc.size); got != tc.v {
			t.Errorf("%q: formatVersion = %q", tc.v, got)
		}
		for k := 1; k < len(enc)-1 && enc[0] == tagPosixCI; k++ {
			if _, err := readVersion(enc[0], enc[1:k]); err == nil {
				t.Errorf("%q: readVersion of %d payload bytes succeeded", tc.v, k-1)
			}
		}
	}

	format := func(data []byte) uint16 { return binary.LittleEndian.Uint16(data[8:]) }
	newer := mustBuild(t, []File{{Path: "a", Size: 1, Version: "5-1-6-7"}, {Path: "b", Size: 1, Version: "e"}}, BuildOptions{})
	older := mustBuild(t, []File{{Path: "a", Size: 1, Version: "5-1"}, {Path: "b", Size: 1, Version: "e"}}, BuildOptions{})
	for _, tc := range []struct {
		m      *Manifest
		format uint16
		legacy int
	}{{newer, 2, 0}, {older, 1, 1}} {
		data := mustEncode(t, tc.m)
		if format(data) != tc.format {
			t.Errorf("format version %d, want %d", format(data), tc.format)
		}
		m, err := Load(data)
		if err != nil {
			t.Fatal(err)
		}
		if m.LegacyPosixVersions() != tc.legacy || tc.m.LegacyPosixVersions() != tc.legacy {
			t.Errorf("LegacyPosixVersions %d (built %d), want %d", m.LegacyPosixVersions(), tc.m.LegacyPosixVersions(), tc.legacy)
		}
		if i, ok := m.Find("a"); !ok || m.Version(i) != tc.m.Version(i) {
			t.Errorf("version of a after a round trip: %q", m.Version(i))
		}
	}
}

// TestBlocks covers the in-memory blocks (names front-coded in blocks of
// blockSize entries): directories of sizes around the block size, starting
// at every offset in a block, names that share long prefixes, and lookups
// of every name and of names just before, between and after them.
func TestBlocks(t *testing.T) {
	var files []File
	var dirs []string
	long := strings.Repeat("p", 250)
	for d, n := range []int{0, 1, 2, 15, 16, 17, 31, 32, 33, 100, 7} {
		dir := fmt.Sprintf("d%02d", d)
		if n == 0 {
			dirs = append(dirs, dir)
		}
		for k := range n {
			name := fmt.Sprintf("n%d_%d.JPEG", d, k*3)
			if k%5 == 4 {
				name = long + fmt.Sprintf("%03d", k) // 253 bytes sharing 250 with its neighbours
			}
			files = append(files, File{Path: dir + "/" + name, Size: int64(k * 1000), Version: fmt.Sprintf("%032x", k+d*1000)})
		}
		if n == 17 {
			files = append(files, File{Path: dir + "/sub/x", Size: 1, Version: "v"})
		}
	}
	for _, sums := range []bool{false, true} {
		fs := slices.Clone(files)
		if sums {
			for i := range fs {
				s := sha256.Sum256([]byte(fs[i].Path))
				fs[i].Sum = s[:]
			}
		}
		m := mustBuild(t, fs, BuildOptions{Info: Info{Checksums: sums}, Dirs: dirs})
		m2, err := Load(mustEncode(t, m))
		if err != nil {
			t.Fatal(err)
		}
		for _, mm := range []*Manifest{m, m2} {
			checkSame(t, mm, fs, dirs)
			for _, f := range fs {
				dir, name := f.Path[:strings.LastIndex(f.Path, "/")], f.Path[strings.LastIndex(f.Path, "/")+1:]
				for _, absent := range []string{name + "0", name[:len(name)-1], "!" + name, "~" + name, ""} {
					if i, ok := mm.Find(dir + "/" + absent); ok && absent != "" {
						t.Errorf("Find(%q) = %d, want absent", dir+"/"+absent, i)
					}
				}
			}
			if _, ok := mm.Find("d00/x"); ok {
				t.Error("found a file in the empty directory")
			}
		}
		if mm := m2.MemoryBytes(); mm <= 0 || m2.OverheadBytes() > mm || m2.NameBytes() <= 0 {
			t.Errorf("MemoryBytes %d, OverheadBytes %d, NameBytes %d", mm, m2.OverheadBytes(), m2.NameBytes())
		}
	}
}
