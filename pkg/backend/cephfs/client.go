//go:build ceph

package cephfs

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ceph/go-ceph/cephfs"
	"github.com/ceph/go-ceph/rados"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/source"
)

// cephClient is one libcephfs mount and the RADOS connection it was made
// from.
type cephClient struct {
	conn  *rados.Conn
	mount *cephfs.MountInfo
}

func (c *cephClient) close() error {
	var errs []error
	if c.mount != nil {
		if c.mount.IsMounted() {
			if err := c.mount.Unmount(); err != nil {
				errs = append(errs, mapCephErr(err))
			}
		}
		if err := c.mount.Release(); err != nil {
			errs = append(errs, mapCephErr(err))
		}
	}
	if c.conn != nil {
		c.conn.Shutdown()
	}
	return errors.Join(errs...)
}

// cephMount connects, configures and mounts one client rooted at the
// dataset directory. The configuration comes, in order, from the Ceph
// config file (CEPH_CONF, else the default search path; optional when the
// URL names the monitor), CEPH_ARGS, CEPH_KEYRING, then the URL (monitor,
// file system) and Options.Credentials (client name, key). The key is set
// in-process with conf_set and never appears in argv, logs or errors.
//
// The client authenticates through a RADOS connection first
// (ceph_create_from_rados): librados reports a refused key at once as
// EACCES, where libcephfs's own init keeps hunting for a monitor until its
// mount timeout.
func cephMount(src source.Source, opts backend.Options) (_ *cephClient, err error) {
	user := src.User
	if opts.Credentials.CephUser != "" {
		user = opts.Credentials.CephUser
	}
	if user == "" {
		user = "admin"
	}
	user = strings.TrimPrefix(user, "client.")
	conn, err := rados.NewConnWithUser(user)
	if err != nil {
		return nil, fmt.Errorf("create client %q: %w", user, mapCephErr(err))
	}
	c := &cephClient{conn: conn}
	defer func() {
		if err != nil {
			_ = c.close()
		}
	}()
	secs, err := configure(conn, src, opts, user)
	if err != nil {
		return nil, err
	}
	if err := connect(conn, user, secs, opts.Credentials.CephKey != ""); err != nil {
		return nil, err
	}
	m, err := cephfs.CreateFromRados(conn)
	if err != nil {
		return nil, fmt.Errorf("create cephfs client: %w", mapCephErr(err))
	}
	c.mount = m
	if err := m.Init(); err != nil {
		return nil, fmt.Errorf("init cephfs client: %w", mapCephErr(err))
	}
	if src.FS != "" {
		if err := m.SelectFilesystem(src.FS); err != nil {
			return nil, fmt.Errorf("select file system %q: %w", src.FS, mapCephErr(err))
		}
	}
	root := src.Path
	if root == "" {
		root = "/"
	}
	if err := m.MountWithRoot(root); err != nil {
		return nil, fmt.Errorf("mount %s as client.%s: %w", root, user, mapCephErr(err))
	}
	return c, nil
}

// configure sets conn's configuration in the order cephMount documents and
// returns the bounded wait it set, in seconds.
func configure(conn *rados.Conn, src source.Source, opts backend.Options, user string) (secs string, err error) {
	if conf := os.Getenv("CEPH_CONF"); conf != "" {
		if err := conn.ReadConfigFile(conf); err != nil {
			return "", fmt.Errorf("read config file %s (CEPH_CONF): %w", conf, mapCephErr(err))
		}
	} else if err := conn.ReadDefaultConfigFile(); err != nil && src.Host == "" {
		return "", fmt.Errorf("read the default Ceph config file: %w", mapCephErr(err))
	}
	if err := conn.ParseDefaultConfigEnv(); err != nil {
		return "", fmt.Errorf("parse CEPH_ARGS: %w", mapCephErr(err))
	}
	set := func(k, v string) error {
		if err := conn.SetConfigOption(k, v); err != nil {
			return fmt.Errorf("set config option %s: %w", k, mapCephErr(err))
		}
		return nil
	}
	if kr := os.Getenv("CEPH_KEYRING"); kr != "" {
		if err := set("keyring", kr); err != nil {
			return "", err
		}
	}
	if src.Host != "" {
		if err := set("mon_host", monAddr(src.Host)); err != nil {
			return "", err
		}
	}
	if key := opts.Credentials.CephKey; key != "" {
		// A key that is not base64 would leave the client hunting for a
		// monitor until the timeout; say so at once instead.
		if _, err := base64.StdEncoding.DecodeString(key); err != nil {
			return "", fmt.Errorf("the key of client.%s is not a Ceph key (base64): %w", user, backend.ErrPermission)
		}
		if err := conn.SetConfigOption("key", key); err != nil {
			// The value is never quoted: it is the secret.
			return "", fmt.Errorf("set the key of client.%s: %w", user, backend.ErrPermission)
		}
	}
	// Bounded waits instead of Ceph's 300 s: a monitor that does not
	// answer surfaces as ErrUnavailable.
	secs = strconv.Itoa(max(1, int(opts.RequestTimeout/time.Second)))
	for _, kv := range [][2]string{{"client_mount_timeout", secs}, {"rados_mon_op_timeout", secs},
		{"log_to_stderr", "false"}, {"err_to_stderr", "false"}} {
		if err := set(kv[0], kv[1]); err != nil {
			return "", err
		}
	}
	return secs, nil
}

// connect connects conn as client.user, naming a refused or invalid key
// (keyGiven: the key came from the credentials) and a silent monitor.
func connect(conn *rados.Conn, user, secs string, keyGiven bool) error {
	err := conn.Connect()
	if err == nil {
		return nil
	}
	err = mapCephErr(err)
	if errors.Is(err, backend.ErrUnavailable) {
		// Over msgr1 (port 6789) a refused key also ends in a timeout.
		return fmt.Errorf("connect as client.%s: %w: no monitor answered within %ss (or, over the v1 protocol, one refused the key)", user, err, secs)
	}
	if keyGiven && isErrno(err, syscall.EINVAL) {
		// librados refuses a key that decodes but is no Ceph key with
		// EINVAL; the value is never quoted.
		return fmt.Errorf("connect as client.%s: %w: the key is not a valid Ceph key (want the output of `ceph auth get-key client.%s`)", user, backend.ErrPermission, user)
	}
	return fmt.Errorf("connect as client.%s: %w", user, err)
}

// monAddr turns the URL's "host[:port]" into a Ceph mon_host value: port
// 6789 is the v1 (msgr1) port, any other port is a v2 (msgr2) one (3300 by
// default), and without a port Ceph tries both defaults. msgr2 matters: a
// monitor refuses a wrong key over it at once (ErrPermission), where over
// msgr1 the client retries until its timeout.
func monAddr(host string) string {
	h, port, err := net.SplitHostPort(host)
	if err != nil {
		return host
	}
	if port == "6789" {
		return "v1:" + net.JoinHostPort(h, port)
	}
	return "v2:" + net.JoinHostPort(h, port)
}
