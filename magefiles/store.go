//go:build mage

package main

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

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
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
	// storeAddr is loopback only: the root credentials below are public.
	storeAddr = "127.0.0.1:7070"
	// storeAccessKey and storeSecretKey are versitygw's root user; the tests'
	// defaults (kerneltest) and the README name the same pair.
	storeAccessKey = "craig"
	storeSecretKey = "craigsecret"
	// storeRegion is what the bucket URL signs with (versitygw's default too).
	storeRegion = "us-east-1"
	storeBucket = "craig-archive"
	// storeHealthPath is versitygw's unauthenticated readiness endpoint
	// (--health): answering it means the S3 API is serving.
	storeHealthPath = "/health"
	// storeStartTimeout bounds the wait for a started versitygw to answer;
	// it starts in well under a second.
	storeStartTimeout = 30 * time.Second
	// storeStopTimeout bounds the wait after SIGTERM before SIGKILL; a
	// graceful shutdown takes about a second.
	storeStopTimeout = 10 * time.Second
	// storeDataDirEnv overrides the data directory; it must be on a
	// filesystem with user extended attributes.
	storeDataDirEnv = "CRAIG_STORE_DATA_DIR"
	// storeCheckXattr is the user extended attribute the data-directory check
	// writes and reads back (versitygw keeps object metadata in user.*).
	storeCheckXattr = "user.craig-retention-check"
)

// Store groups the local S3 server (versitygw) targets.
type Store mg.Namespace

// Up installs versitygw once (cached), starts it on 127.0.0.1:7070 (craig/craigsecret) and creates bucket craig-archive; a no-op when it is up.
func (Store) Up(ctx context.Context) error {
	p, err := storeLayout()
	if err != nil {
		return err
	}
	unlock, err := lockStore(p)
	if err != nil {
		return err
	}
	defer unlock()

	if pid, ok := runningStore(p); ok {
		if err := waitStoreReady(ctx, nil); err != nil {
			return fmt.Errorf("versitygw (pid %d) is running but does not answer (log %s; try `go tool mage store:down`): %w", pid, p.log, err)
		}
		err := ensureBucket(ctx)
		if !errors.Is(err, errNoObjectLock) {
			if err == nil {
				fmt.Printf("store is up: versitygw pid %d at http://%s, bucket %s (log %s)\n", pid, storeAddr, storeBucket, p.log)
			}
			return err
		}
		// A store from before Object Lock (issue 12): its bucket cannot gain
		// it. Stop it and keep its data aside; a fresh store follows.
		if err := restartWithoutData(p, pid); err != nil {
			return err
		}
	}
	if storeListening() {
		// Not ours (no live pid file), e.g. a CI service container: use it
		// when it is an S3 server that takes our credentials.
		if err := ensureBucket(ctx); errors.Is(err, errNoObjectLock) {
			fmt.Printf("NOTE: %v on the S3 server store:up did not start: the store-enforced legal-hold tests will fail\n", err)
		} else if err != nil {
			return fmt.Errorf("%s is taken by a process store:up did not start, and it is not a usable S3 server: %w", storeAddr, err)
		}
		fmt.Printf("store is up: an S3 server store:up did not start answers at http://%s; bucket %s is ready\n", storeAddr, storeBucket)
		return nil
	}

	if err := installVersitygw(p); err != nil {
		return err
	}
	data, err := storeDataDir(p)
	if err != nil {
		return err
	}
	start := time.Now()
	pid, err := startVersitygw(ctx, p, data)
	if err != nil {
		return err
	}
	if err := ensureBucket(ctx); err != nil {
		return err
	}
	fmt.Printf("store is up: versitygw pid %d at http://%s in %s, bucket %s, data %s (log %s)\n",
		pid, storeAddr, time.Since(start).Round(time.Millisecond), storeBucket, data, p.log)
	return nil
}

// Down stops the versitygw store:up started (SIGTERM via its pid file, SIGKILL after 10 s); a no-op when none runs.
func (Store) Down() error {
	p, err := storeLayout()
	if err != nil {
		return err
	}
	unlock, err := lockStore(p)
	if err != nil {
		return err
	}
	defer unlock()

	pid, ok := runningStore(p)
	if !ok {
		fmt.Printf("store is not running (no live versitygw in %s)\n", p.pid)
		if storeListening() {
			fmt.Printf("NOTE: something store:up did not start still listens on %s\n", storeAddr)
		}
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop versitygw (pid %d): %w", pid, err)
	}
	deadline := time.Now().Add(storeStopTimeout)
	for processAlive(pid) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if processAlive(pid) {
		fmt.Printf("versitygw (pid %d) ignored SIGTERM for %s: killing it\n", pid, storeStopTimeout)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("kill versitygw (pid %d): %w", pid, err)
		}
	}
	if err := os.Remove(p.pid); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove pid file: %w", err)
	}
	fmt.Printf("store is down: stopped versitygw pid %d\n", pid)
	return nil
}

// storePaths are store:up's files: the cached binary and the state
// directory (pid, log, lock), under the user cache directory
// ($XDG_CACHE_HOME or ~/.cache)/craig-retention, outside the repo.
type storePaths struct {
	root, binDir, bin, state, pid, log, lock string
}

func storeLayout() (storePaths, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return storePaths{}, fmt.Errorf("user cache directory: %w", err)
	}
	root := filepath.Join(cache, "craig-retention")
	binDir := filepath.Join(root, "versitygw-"+versitygwVersion)
	state := filepath.Join(root, "store")
	return storePaths{
		root:   root,
		binDir: binDir,
		bin:    filepath.Join(binDir, "versitygw"),
		state:  state,
		pid:    filepath.Join(state, "versitygw.pid"),
		log:    filepath.Join(state, "versitygw.log"),
		lock:   filepath.Join(state, "store.lock"),
	}, nil
}

// lockStore serialises store:up and store:down across processes (two test
// runs starting at once must not both start a server).
func lockStore(p storePaths) (unlock func(), err error) {
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

// runningStore returns the pid of the versitygw the pid file names when that
// process is alive and runs the cached binary; it removes a stale pid file.
func runningStore(p storePaths) (int, bool) {
	raw, err := os.ReadFile(p.pid)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err == nil && pid > 0 && processAlive(pid) {
		// A recycled pid runs something else; a zombie has no cmdline.
		cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err == nil {
			if argv0, _, _ := strings.Cut(string(cmdline), "\x00"); argv0 == p.bin {
				return pid, true
			}
		}
	}
	_ = os.Remove(p.pid)
	return 0, false
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// storeListening reports whether anything accepts TCP connections on storeAddr.
func storeListening() bool {
	conn, err := net.DialTimeout("tcp", storeAddr, dialTimeout)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// installVersitygw installs the pinned versitygw into its cache directory
// unless it is there. It builds outside the workspace (GOWORK=off) into a
// temporary GOBIN and renames the binary into place, so an interrupted
// install never leaves a partial binary behind.
func installVersitygw(p storePaths) error {
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

// storeDataDir picks the data directory: $CRAIG_STORE_DATA_DIR when set,
// else the first of <cache>/craig-retention/store/data and
// <tmp>/craig-retention-store/data whose filesystem keeps user extended
// attributes, where versitygw's posix backend stores object metadata.
func storeDataDir(p storePaths) (string, error) {
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

// startVersitygw starts versitygw detached (its own session, so it outlives
// mage and a terminal's Ctrl-C), writes the pid file and waits until it
// answers. The previous run's log is kept as versitygw.log.prev.
func startVersitygw(ctx context.Context, p storePaths, data string) (int, error) {
	if err := os.Rename(p.log, p.log+".prev"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("rotate store log: %w", err)
	}
	logFile, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, fmt.Errorf("store log: %w", err)
	}
	defer func() { _ = logFile.Close() }() // the child keeps its own descriptor
	if err := os.MkdirAll(versionsDir(data), 0o755); err != nil {
		return 0, fmt.Errorf("store versions directory: %w", err)
	}
	args := []string{
		"--port", storeAddr, // loopback only (the default ":7070" is every interface)
		"--access", storeAccessKey, "--secret", storeSecretKey, // root user (single-account mode)
		"--region", storeRegion,
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
	if err := os.WriteFile(p.pid, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		_ = cmd.Process.Kill()
		return 0, fmt.Errorf("write pid file: %w", err)
	}
	if err := waitStoreReady(ctx, exited); err != nil {
		_ = cmd.Process.Kill()
		_ = os.Remove(p.pid)
		tail, _ := os.ReadFile(p.log)
		return 0, fmt.Errorf("versitygw did not come up: %w\n%s", err, tail)
	}
	return pid, nil
}

// waitStoreReady polls the health endpoint until it answers 200, the
// started process exits (exited, may be nil) or storeStartTimeout passes.
func waitStoreReady(ctx context.Context, exited <-chan error) error {
	ctx, cancel := context.WithTimeout(ctx, storeStartTimeout)
	defer cancel()
	client := &http.Client{Timeout: dialTimeout}
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+storeAddr+storeHealthPath, nil)
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
			return fmt.Errorf("no answer at http://%s%s within %s: %w", storeAddr, storeHealthPath, storeStartTimeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ensureBucket creates storeBucket unless it exists (HEAD, then PUT), with
// the AWS SDK the kernel's store uses, as the root user.
func ensureBucket(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	client := s3.New(s3.Options{
		Region:       storeRegion,
		BaseEndpoint: aws.String("http://" + storeAddr),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(storeAccessKey, storeSecretKey, ""),
	})
	_, err := client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(storeBucket)})
	switch status := httpStatus(err); {
	case err == nil:
		lock, err := client.GetObjectLockConfiguration(ctx, &s3.GetObjectLockConfigurationInput{Bucket: aws.String(storeBucket)})
		if err != nil || lock.ObjectLockConfiguration == nil || lock.ObjectLockConfiguration.ObjectLockEnabled != types.ObjectLockEnabledEnabled {
			return fmt.Errorf("%w: bucket %s", errNoObjectLock, storeBucket)
		}
		return nil
	case status != http.StatusNotFound:
		return fmt.Errorf("head bucket %s at %s (wrong credentials? store:up uses %s): %w", storeBucket, storeAddr, storeAccessKey, err)
	}
	// With S3 Object Lock (and so versioning): a legal hold on an archive's
	// objects makes the store itself refuse to delete them (issue 12).
	_, err = client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(storeBucket), ObjectLockEnabledForBucket: aws.Bool(true)})
	// 409 BucketAlreadyOwnedByYou: a concurrent creator won; the bucket is there.
	if err != nil && httpStatus(err) != http.StatusConflict {
		return fmt.Errorf("create bucket %s: %w", storeBucket, err)
	}
	fmt.Printf("created bucket %s\n", storeBucket)
	return nil
}

// errNoObjectLock: the bucket exists without S3 Object Lock.
var errNoObjectLock = errors.New("the bucket has no S3 Object Lock")

// versionsDir is versitygw's versioning directory for a data directory.
func versionsDir(data string) string { return filepath.Join(filepath.Dir(data), "versions") }

// restartWithoutData stops the running store and moves its data directory
// aside (kept as data.before-object-lock.<time>), so the next start creates
// the bucket with Object Lock.
func restartWithoutData(p storePaths, pid int) error {
	fmt.Printf("==> the store's bucket %s has no S3 Object Lock: restarting versitygw with a fresh bucket\n", storeBucket)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop versitygw (pid %d): %w", pid, err)
	}
	for deadline := time.Now().Add(storeStopTimeout); processAlive(pid) && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	if processAlive(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = os.Remove(p.pid)
	data, err := storeDataDir(p)
	if err != nil {
		return err
	}
	aside := data + ".before-object-lock." + time.Now().Format("20060102T150405")
	if err := os.Rename(data, aside); err != nil {
		return fmt.Errorf("move the old store data aside: %w", err)
	}
	fmt.Printf("old store data kept in %s\n", aside)
	return nil
}

// httpStatus is the HTTP status of the S3 response behind err, or 0.
func httpStatus(err error) int {
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}
