package source_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/epochfs/epochfs/pkg/source"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  string
		want source.Source
		str  string // canonical String(); "" means raw
	}{
		{"posix", "/data/set", source.Source{Kind: source.KindPosix, Path: "/data/set"}, ""},
		{"posix cleaned", "/data//set/../x/", source.Source{Kind: source.KindPosix, Path: "/data/x"}, "/data/x"},
		{"posix root", "/", source.Source{Kind: source.KindPosix, Path: "/"}, ""},
		{"file URL", "file:///mnt/nfs/ds", source.Source{Kind: source.KindPosix, Path: "/mnt/nfs/ds"}, "/mnt/nfs/ds"},
		{"file URL localhost", "file://localhost/mnt/ds", source.Source{Kind: source.KindPosix, Path: "/mnt/ds"}, "/mnt/ds"},
		{"file URL escaped comma", "file:///a%2Cb", source.Source{Kind: source.KindPosix, Path: "/a,b"}, "file:///a%2Cb"},
		{"posix spaces", "/data/my set", source.Source{Kind: source.KindPosix, Path: "/data/my set"}, ""},
		{"s3 bucket", "s3://bucket", source.Source{Kind: source.KindS3, Bucket: "bucket"}, ""},
		{"s3 bucket slash", "s3://bucket/", source.Source{Kind: source.KindS3, Bucket: "bucket"}, "s3://bucket"},
		{"s3 prefix", "s3://my-bucket.v2/data/train/", source.Source{Kind: source.KindS3, Bucket: "my-bucket.v2", Prefix: "data/train"}, "s3://my-bucket.v2/data/train"},
		{"s3 endpoint", "s3://bucket/prefix?endpoint=http://127.0.0.1:9000&region=us-east-1",
			source.Source{Kind: source.KindS3, Bucket: "bucket", Prefix: "prefix", Endpoint: "http://127.0.0.1:9000", Region: "us-east-1", PathStyle: true},
			"s3://bucket/prefix?endpoint=http%3A%2F%2F127.0.0.1%3A9000&region=us-east-1"},
		{"s3 bare endpoint is https", "s3://bucket?endpoint=oss-cn-hangzhou.aliyuncs.com&pathStyle=false",
			source.Source{Kind: source.KindS3, Bucket: "bucket", Endpoint: "https://oss-cn-hangzhou.aliyuncs.com"},
			"s3://bucket?endpoint=https%3A%2F%2Foss-cn-hangzhou.aliyuncs.com&pathStyle=false"},
		{"s3 endpoint trailing slash", "s3://bucket?endpoint=https://S3.example.com:8443/",
			source.Source{Kind: source.KindS3, Bucket: "bucket", Endpoint: "https://s3.example.com:8443", PathStyle: true},
			"s3://bucket?endpoint=https%3A%2F%2Fs3.example.com%3A8443"},
		{"s3 path style on AWS", "s3://bucket?pathStyle=true&region=eu-west-1",
			source.Source{Kind: source.KindS3, Bucket: "bucket", Region: "eu-west-1", PathStyle: true}, ""},
		{"s3 prefix with spaces and unicode", "s3://bucket/my%20data/%E6%97%A5%E6%9C%AC",
			source.Source{Kind: source.KindS3, Bucket: "bucket", Prefix: "my data/日本"}, ""},
		{"s3 scheme case", "S3://bucket/x", source.Source{Kind: source.KindS3, Bucket: "bucket", Prefix: "x"}, "s3://bucket/x"},
		{"cephfs", "cephfs://admin@mon1:6789/volumes/ds?fs=cephfs",
			source.Source{Kind: source.KindCephFS, User: "admin", Host: "mon1:6789", Path: "/volumes/ds", FS: "cephfs"}, ""},
		{"cephfs minimal", "cephfs://mon1", source.Source{Kind: source.KindCephFS, Host: "mon1", Path: "/"}, "cephfs://mon1/"},
		{"nfs", "nfs://nas.local:2049/export/ds", source.Source{Kind: source.KindNFS, Host: "nas.local:2049", Path: "/export/ds"}, ""},
		{"nfs ipv6", "nfs://[::1]/export", source.Source{Kind: source.KindNFS, Host: "[::1]", Path: "/export"}, ""},
		{"nfs options", "nfs://Filer:2049/export/ds?rsize=65536&conns=4&mountport=20048&gid=100&uid=1000",
			source.Source{Kind: source.KindNFS, Host: "filer:2049", Path: "/export/ds", UID: 1000, GID: 100, MountPort: 20048, Conns: 4, ReadSize: 65536},
			"nfs://filer:2049/export/ds?conns=4&gid=100&mountport=20048&rsize=65536&uid=1000"},
		{"nfs root uid", "nfs://nas/x?uid=0", source.Source{Kind: source.KindNFS, Host: "nas", Path: "/x"}, "nfs://nas/x"},
		{"nfs rsize units", "nfs://nas/x?rsize=1Mi", source.Source{Kind: source.KindNFS, Host: "nas", Path: "/x", ReadSize: 1 << 20}, "nfs://nas/x?rsize=1048576"},
		{"nfs rsize old units", "nfs://nas/x?rsize=64KiB", source.Source{Kind: source.KindNFS, Host: "nas", Path: "/x", ReadSize: 64 << 10}, "nfs://nas/x?rsize=65536"},
		{"mirror", "mirror:s3://a-bucket/ds?region=us-east-1,/mnt/ds",
			source.Source{Kind: source.KindMirror, Replicas: []source.Source{
				{Kind: source.KindS3, Bucket: "a-bucket", Prefix: "ds", Region: "us-east-1"},
				{Kind: source.KindPosix, Path: "/mnt/ds"},
			}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := source.Parse(tc.raw)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.raw, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Parse(%q) = %#v, want %#v", tc.raw, got, tc.want)
			}
			wantStr := tc.str
			if wantStr == "" {
				wantStr = tc.raw
			}
			if got.String() != wantStr {
				t.Errorf("String() = %q, want %q", got.String(), wantStr)
			}
			again, err := source.Parse(got.String())
			if err != nil || !reflect.DeepEqual(again, got) {
				t.Errorf("Parse(String()) = %#v, %v; want %#v", again, err, got)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	const creds = "credentials in the URL are not allowed: pass them through the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), a credentials file or a secret"
	for _, tc := range []struct {
		name string
		raw  string
		want string
	}{
		{"empty", "", `source "": empty source`},
		{"relative path", "data/x", `source "data/x": path must be absolute or a URL (file://, s3://, cephfs://, nfs://, mirror:)`},
		{"unknown scheme", "gs://bucket/x", `source "gs://bucket/x": unknown scheme "gs" (want file, s3, cephfs, nfs or mirror)`},
		{"control char", "/data/\x01x", `source "/data/\x01x": contains a control character`},
		{"file relative", "file://data/x", `source "file://data/x": file URL host "data": only local paths (file:///abs/path) are supported`},
		{"file query", "file:///x?y=1", `source "file:///x?y=1": file URL takes no query parameters`},
		{"s3 empty bucket", "s3:///x", `source "s3:///x": bucket is empty`},
		{"s3 opaque", "s3:bucket/x", `source "s3:bucket/x": expected s3://…`},
		{"s3 bucket upper", "s3://MyBucket/x", `source "s3://MyBucket/x": bucket "MyBucket": only lowercase letters, digits, '.' and '-' are allowed`},
		{"s3 bucket short", "s3://ab", `source "s3://ab": bucket "ab": must be 3 to 63 characters long`},
		{"s3 bucket ip", "s3://192.168.1.1", `source "s3://192.168.1.1": bucket "192.168.1.1": must not be formatted as an IP address`},
		{"s3 bucket dash", "s3://-bucket", `source "s3://-bucket": bucket "-bucket": must begin and end with a letter or digit`},
		{"s3 bucket dots", "s3://a..b", `source "s3://a..b": bucket "a..b": must not contain ".."`},
		{"s3 bucket port", "s3://bucket:9000/x", `source "s3://bucket:9000/x": bucket "bucket:9000": only lowercase letters, digits, '.' and '-' are allowed`},
		{"s3 prefix dotdot", "s3://bucket/a/../b", `source "s3://bucket/a/../b": prefix "a/../b": not a clean relative path (no empty, "." or ".." components, no control characters, components up to 255 bytes)`},
		{"s3 prefix empty component", "s3://bucket/a//b", `source "s3://bucket/a//b": prefix "a//b": not a clean relative path (no empty, "." or ".." components, no control characters, components up to 255 bytes)`},
		{"s3 unknown param", "s3://bucket/x?endpoint=http://h:9000&acl=public", `source "s3://bucket/x?endpoint=http://h:9000&acl=public": unknown query parameter "acl" (allowed: endpoint, region, pathStyle)`},
		{"s3 repeated param", "s3://bucket?region=a&region=b", `source "s3://bucket?region=a&region=b": query parameter "region" given 2 times`},
		{"s3 endpoint scheme", "s3://bucket?endpoint=ftp://h", `source "s3://bucket?endpoint=ftp://h": endpoint "ftp://h": scheme must be http or https`},
		{"s3 endpoint path", "s3://bucket?endpoint=http://h:9000/minio", `source "s3://bucket?endpoint=http://h:9000/minio": endpoint "http://h:9000/minio": must be scheme://host[:port] with no path or query`},
		{"s3 endpoint port", "s3://bucket?endpoint=http://h:99999", `source "s3://bucket?endpoint=http://h:99999": endpoint "http://h:99999": port "99999" must be 1-65535`},
		{"s3 endpoint empty", "s3://bucket?endpoint=", `source "s3://bucket?endpoint=": endpoint is empty`},
		{"s3 region", "s3://bucket?region=US_EAST", `source "s3://bucket?region=US_EAST": region "US_EAST": want lowercase letters, digits and dashes`},
		{"s3 pathStyle", "s3://bucket?pathStyle=yes", `source "s3://bucket?pathStyle=yes": pathStyle "yes": want true or false`},
		{"s3 fragment", "s3://bucket/x#frag", `source "s3://bucket/x#frag": fragment (#…) is not allowed`},
		{"s3 credentials", "s3://AKIA:s3cr3t@bucket/x", `source "s3://REDACTED@bucket/x": ` + creds},
		{"s3 user only", "s3://AKIA@bucket/x", `source "s3://REDACTED@bucket/x": ` + creds},
		{"s3 endpoint credentials", "s3://bucket?endpoint=http://u:s3cr3t@h:9000", `source "s3://bucket?endpoint=http://REDACTED@h:9000": endpoint: ` + creds},
		{"s3 endpoint encoded credentials", "s3://bucket?endpoint=http%3A%2F%2Fu%3As3cr3t%40h%3A9000", `source "s3://bucket?endpoint=http%3A%2F%2FREDACTED%40h%3A9000": endpoint: ` + creds},
		{"cephfs password", "cephfs://admin:s3cr3t@mon/x", `source "cephfs://REDACTED@mon/x": ` + creds},
		{"cephfs no host", "cephfs:///x", `source "cephfs:///x": monitor host is empty`},
		{"cephfs bad param", "cephfs://mon/x?pool=a", `source "cephfs://mon/x?pool=a": unknown query parameter "pool" (allowed: fs)`},
		{"nfs no host", "nfs:///export", `source "nfs:///export": server host is empty`},
		{"nfs no export", "nfs://nas", `source "nfs://nas": export path is empty`},
		{"nfs bad port", "nfs://nas:0/x", `source "nfs://nas:0/x": server host "nas:0": port "0" must be 1-65535`},
		{"nfs query", "nfs://nas/x?vers=4", `source "nfs://nas/x?vers=4": unknown query parameter "vers" (allowed: uid, gid, mountport, conns, rsize)`},
		{"nfs bad uid", "nfs://nas/x?uid=-1", `source "nfs://nas/x?uid=-1": uid "-1": want a whole number from 0 to 4294967294`},
		{"nfs uid twice", "nfs://nas/x?uid=1&uid=2", `source "nfs://nas/x?uid=1&uid=2": query parameter "uid" given 2 times`},
		{"nfs bad gid", "nfs://nas/x?gid=4294967295", `source "nfs://nas/x?gid=4294967295": gid "4294967295": want a whole number from 0 to 4294967294`},
		{"nfs bad mountport", "nfs://nas/x?mountport=0", `source "nfs://nas/x?mountport=0": mountport "0": want a whole number from 1 to 65535`},
		{"nfs conns too many", "nfs://nas/x?conns=65", `source "nfs://nas/x?conns=65": conns "65": want a whole number from 1 to 64`},
		{"nfs rsize small", "nfs://nas/x?rsize=1024", `source "nfs://nas/x?rsize=1024": rsize "1024": want a size from 4Ki to 16Mi (4096 to 16777216 bytes), e.g. 1Mi`},
		{"nfs rsize large", "nfs://nas/x?rsize=32Mi", `source "nfs://nas/x?rsize=32Mi": rsize "32Mi": want a size from 4Ki to 16Mi (4096 to 16777216 bytes), e.g. 1Mi`},
		{"nfs rsize milli", "nfs://nas/x?rsize=500m", `source "nfs://nas/x?rsize=500m": rsize: invalid size "500m": "m" is milli in Kubernetes quantities, not a byte unit: write 500M (megabytes) or 500Mi (mebibytes)`},
		{"nfs rsize junk", "nfs://nas/x?rsize=big", `source "nfs://nas/x?rsize=big": rsize: invalid size "big": want a number with an optional unit (B, K, KB, KiB, Ki, M, MB, MiB, Mi, G, GB, GiB, Gi, T, TB, TiB, Ti, P, PB, PiB, Pi, E, EB, EiB, Ei)`},
		{"nfs leading zero", "nfs://nas/x?conns=08", `source "nfs://nas/x?conns=08": conns "08": want a whole number from 1 to 64`},
		{"mirror empty", "mirror:", `source "mirror:": mirror: no replicas (want mirror:URL1,URL2[,...])`},
		{"mirror one", "mirror:/a", `source "mirror:/a": mirror: needs at least 2 replicas, got 1`},
		{"mirror nested", "mirror:/a,mirror:/b", `source "mirror:/a,mirror:/b": mirror replica 2: a mirror cannot contain another mirror`},
		{"mirror bad replica", "mirror:/a,s3:///b", `source "mirror:/a,s3:///b": mirror replica 2: bucket is empty`},
		{"mirror duplicate", "mirror:/a,file:///a", `source "mirror:/a,file:///a": mirror replica 2 duplicates replica 1`},
		{"mirror credentials", "mirror:/a,s3://k:s3cr3t@bucket", `source "mirror:/a,s3://REDACTED@bucket": mirror replica 2: ` + creds},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, err := source.Parse(tc.raw)
			if err == nil {
				t.Fatalf("Parse(%q) = %v, want an error", tc.raw, src)
			}
			if !errors.Is(err, source.ErrInvalidURL) {
				t.Errorf("Parse(%q) error %v does not wrap ErrInvalidURL", tc.raw, err)
			}
			if err.Error() != tc.want {
				t.Errorf("Parse(%q) error\n got: %s\nwant: %s", tc.raw, err, tc.want)
			}
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("Parse(%q) error leaks the password: %s", tc.raw, err)
			}
		})
	}
}
