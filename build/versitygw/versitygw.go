// Package versitygw installs and runs the local S3 server of the tests and
// the demo: versitygw, pinned, cached outside the repository.
package versitygw

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/craig/retention/build/workspace"
	"github.com/craig/retention/kernel/settings"
	"github.com/magefile/mage/mg"
	"github.com/magefile/mage/sh"
)

// The local S3 server of the tests and the demo: versitygw (Apache-2.0) with
// its posix backend, pinned, installed once per machine and cached outside
// the repo, listening on loopback only.
const (
	// versitygwVersion pins the server; the cache directory is per version,
	// so a bump installs afresh.
	versitygwVersion = "v1.8.0"
	versitygwPackage = "github.com/versity/versitygw/cmd/versitygw"
	// Addr is loopback only: the root credentials below are public.
	Addr = "127.0.0.1:7070"
	// AccessKey and SecretKey are versitygw's root user; the tests'
	// defaults (kerneltest) and docs/testing.md name the same pair.
	AccessKey = "craig"
	SecretKey = "craigsecret"
	// Region is what the bucket URL signs with (versitygw's default too).
	Region = "us-east-1"
	// storeHealthPath is versitygw's unauthenticated readiness endpoint
	// (--health): answering it means the S3 API is serving.
	storeHealthPath = "/health"
	// storeStartTimeout bounds the wait for a started versitygw to answer;
	// it starts in well under a second.
	storeStartTimeout = 30 * time.Second
	// StopTimeout bounds the wait after SIGTERM before SIGKILL; a
	// graceful shutdown takes about a second.
	StopTimeout = 10 * time.Second
	// storeDataDirEnv overrides the data directory; it must be on a
	// filesystem with user extended attributes.
	storeDataDirEnv = "CRAIG_STORE_DATA_DIR"
	// storeCheckXattr is the user extended attribute the data-directory check
	// writes and reads back (versitygw keeps object metadata in user.*).
	storeCheckXattr = "user.craig-retention-check"
)

// Paths are store:up's files: the cached binary and the state
// directory (pid, log, lock), under the user cache directory
// ($XDG_CACHE_HOME or ~/.cache)/craig-retention, outside the repo.
type Paths struct {
	root, binDir, bin, state, lock string
	// PID and Log are the pid file and the server's log.
	PID, Log string
}

func Layout() (Paths, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return Paths{}, fmt.Errorf("user cache directory: %w", err)
	}
	root := filepath.Join(cache, "craig-retention")
	binDir := filepath.Join(root, "versitygw-"+versitygwVersion)
	state := filepath.Join(root, "store")
	return Paths{
		root:   root,
		binDir: binDir,
		bin:    filepath.Join(binDir, "versitygw"),
		state:  state,
		PID:    filepath.Join(state, "versitygw.pid"),
		Log:    filepath.Join(state, "versitygw.log"),
		lock:   filepath.Join(state, "store.lock"),
	}, nil
}

// Lock serialises store:up and store:down across processes (two test
// runs starting at once must not both start a server).
func Lock(p Paths) (unlock func(), err error) {
	if err := os.MkdirAll(p.state, 0o755); err != nil {
		return nil, fmt.Errorf("store state directory: %w", err)
	}
	f, err := os.OpenFile(p.lock, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("store lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("store lock %s: %w", p.lock, err)
	}
	return func() { _ = f.Close() }, nil // closing releases the flock
}

// Running returns the pid of the versitygw the pid file names when that
// process is alive and runs the cached binary; it removes a stale pid file.
func Running(p Paths) (int, bool) {
	raw, err := os.ReadFile(p.PID)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err == nil && pid > 0 && Alive(pid) {
		// A recycled pid runs something else; a zombie has no cmdline.
		cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err == nil {
			if argv0, _, _ := strings.Cut(string(cmdline), "\x00"); argv0 == p.bin {
				return pid, true
			}
		}
	}
	_ = os.Remove(p.PID)
	return 0, false
}

func Alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Listening reports whether anything accepts TCP connections on Addr.
func Listening() bool {
	conn, err := net.DialTimeout("tcp", Addr, workspace.DialTimeout)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// Install installs the pinned versitygw into its cache directory
// unless it is there. It builds outside the workspace (GOWORK=off) into a
// temporary GOBIN and renames the binary into place, so an interrupted
// install never leaves a partial binary behind.
func Install(p Paths) error {
	if fi, err := os.Stat(p.bin); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return nil
	}
	if err := os.MkdirAll(p.binDir, 0o755); err != nil {
		return fmt.Errorf("versitygw cache directory: %w", err)
	}
	tmp, err := os.MkdirTemp(p.root, "versitygw-install-")
	if err != nil {
		return fmt.Errorf("versitygw install directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	fmt.Printf("==> go install %s@%s into %s (once per machine; takes minutes)\n", versitygwPackage, versitygwVersion, p.binDir)
	start := time.Now()
	env := map[string]string{"GOWORK": "off", "GOBIN": tmp}
	if err := sh.RunWithV(env, mg.GoCmd(), "install", versitygwPackage+"@"+versitygwVersion); err != nil {
		return fmt.Errorf("install versitygw %s: %w", versitygwVersion, err)
	}
	if err := os.Rename(filepath.Join(tmp, "versitygw"), p.bin); err != nil {
		return fmt.Errorf("install versitygw: %w", err)
	}
	fmt.Printf("installed versitygw %s in %s\n", versitygwVersion, time.Since(start).Round(time.Second))
	return nil
}

// DataDir picks the data directory: $CRAIG_STORE_DATA_DIR when set,
// else the first of <cache>/craig-retention/store/data and
// <tmp>/craig-retention-store/data whose filesystem keeps user extended
// attributes, where versitygw's posix backend stores object metadata.
func DataDir(p Paths) (string, error) {
	candidates := []string{filepath.Join(p.state, "data"), filepath.Join(os.TempDir(), "craig-retention-store", "data")}
	if dir := os.Getenv(storeDataDirEnv); dir != "" {
		candidates = []string{dir}
	}
	var errs []error
	for _, dir := range candidates {
		err := checkUserXattr(dir)
		if err == nil {
			return dir, nil
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("no usable data directory for versitygw, whose posix backend keeps object metadata in user extended attributes "+
		"(set %s to a writable directory on a filesystem that keeps them: ext4, xfs, btrfs; tmpfs from Linux 6.6):\n%w",
		storeDataDirEnv, errors.Join(errs...))
}

// checkUserXattr creates dir and writes, reads back and removes a user
// extended attribute on a scratch file in it.
func checkUserXattr(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".xattr-check-")
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	name := f.Name()
	_ = f.Close()
	defer func() { _ = os.Remove(name) }()
	if err := syscall.Setxattr(name, storeCheckXattr, []byte("1"), 0); err != nil {
		return fmt.Errorf("%s: set %s: %w", dir, storeCheckXattr, err)
	}
	buf := make([]byte, 8)
	n, err := syscall.Getxattr(name, storeCheckXattr, buf)
	if err != nil || string(buf[:n]) != "1" {
		return fmt.Errorf("%s: read back %s: got %q: %w", dir, storeCheckXattr, buf[:max(n, 0)], err)
	}
	return nil
}

// Start starts versitygw detached (its own session, so it outlives
// mage and a terminal's Ctrl-C), writes the pid file and waits until it
// answers. The previous run's log is kept as versitygw.log.prev.
func Start(ctx context.Context, p Paths, data string) (int, error) {
	if err := os.Rename(p.Log, p.Log+".prev"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("rotate store log: %w", err)
	}
	logFile, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, fmt.Errorf("store log: %w", err)
	}
	defer func() { _ = logFile.Close() }() // the child keeps its own descriptor
	if err := os.MkdirAll(versionsDir(data), 0o755); err != nil {
		return 0, fmt.Errorf("store versions directory: %w", err)
	}
	args := []string{
		"--port", Addr, // loopback only (the default ":7070" is every interface)
		"--access", AccessKey, "--secret", SecretKey, // root user (single-account mode)
		"--region", Region,
		"--health", storeHealthPath,
		// backend: top-level directories are buckets; versions (Object Lock
		// needs a versioned bucket) live beside them.
		"posix", "--versioning-dir", versionsDir(data), data,
	}
	fmt.Printf("==> %s %s\n", p.bin, strings.Join(args, " "))
	cmd := exec.Command(p.bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start versitygw: %w", err)
	}
	pid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err := os.WriteFile(p.PID, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		_ = cmd.Process.Kill()
		return 0, fmt.Errorf("write pid file: %w", err)
	}
	if err := WaitReady(ctx, exited); err != nil {
		_ = cmd.Process.Kill()
		_ = os.Remove(p.PID)
		tail, _ := os.ReadFile(p.Log)
		return 0, fmt.Errorf("versitygw did not come up: %w\n%s", err, tail)
	}
	return pid, nil
}

// WaitReady polls the health endpoint until it answers 200, the
// started process exits (exited, may be nil) or storeStartTimeout passes.
func WaitReady(ctx context.Context, exited <-chan error) error {
	ctx, cancel := context.WithTimeout(ctx, storeStartTimeout)
	defer cancel()
	client := &http.Client{Timeout: workspace.DialTimeout}
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+Addr+storeHealthPath, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET %s: %s", storeHealthPath, resp.Status)
		}
		last = err
		select {
		case err := <-exited:
			return fmt.Errorf("versitygw exited: %w", err)
		case <-ctx.Done():
			return fmt.Errorf("no answer at http://%s%s within %s: %w", Addr, storeHealthPath, storeStartTimeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// versionsDir is versitygw's versioning directory for a data directory.
func versionsDir(data string) string { return filepath.Join(filepath.Dir(data), "versions") }

// Bucket is the bucket store:up creates (the demo's archives).
const Bucket = "craig-archive"

// BucketURL is the store URL of Bucket on the local versitygw (the demo's
// archives).
func BucketURL() string {
	return "s3://" + Bucket + "?endpoint=http://" + Addr + "&region=" + Region + "&use_path_style=true&disable_https=true"
}

// ArchiverEnv is a service's environment with its archiver turned on,
// storing into storeURL (a bucket of the local versitygw, such as
// BucketURL()).
func ArchiverEnv(service, dbURL, storeURL string) map[string]string {
	return map[string]string{
		workspace.DatabaseEnv(service):                dbURL,
		settings.EnvVar(service, "archive.enabled"):   "true",
		settings.EnvVar(service, "archive.store.url"): storeURL,
		"AWS_ACCESS_KEY_ID":                           workspace.EnvOr("AWS_ACCESS_KEY_ID", AccessKey),
		"AWS_SECRET_ACCESS_KEY":                       workspace.EnvOr("AWS_SECRET_ACCESS_KEY", SecretKey),
	}
}
