// Package store starts and stops the local S3 store and makes its bucket.
package store

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/craig/retention/build/versitygw"
	"github.com/craig/retention/build/workspace"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/magefile/mage/mg"
)

// Store groups the local S3 server (versitygw) targets.
type Store mg.Namespace

// Up installs versitygw once (cached), starts it on 127.0.0.1:7070 (craig/craigsecret) and creates bucket craig-archive; a no-op when it is up.
func (Store) Up(ctx context.Context) error {
	p, err := versitygw.Layout()
	if err != nil {
		return err
	}
	unlock, err := versitygw.Lock(p)
	if err != nil {
		return err
	}
	defer unlock()

	if pid, ok := versitygw.Running(p); ok {
		if err := versitygw.WaitReady(ctx, nil); err != nil {
			return fmt.Errorf("versitygw (pid %d) is running but does not answer (log %s; try `go tool mage store:down`): %w", pid, p.Log, err)
		}
		err := ensureBucket(ctx)
		if !errors.Is(err, errNoObjectLock) {
			if err == nil {
				fmt.Printf("store is up: versitygw pid %d at http://%s, bucket %s (log %s)\n", pid, versitygw.Addr, versitygw.Bucket, p.Log)
			}
			return err
		}
		// A store from before Object Lock: its bucket cannot gain
		// it. Stop it and keep its data aside; a fresh store follows.
		if err := restartWithoutData(p, pid); err != nil {
			return err
		}
	}
	if versitygw.Listening() {
		// Not ours (no live pid file), e.g. a CI service container: use it
		// when it is an S3 server that takes our credentials.
		if err := ensureBucket(ctx); errors.Is(err, errNoObjectLock) {
			fmt.Printf("NOTE: %v on the S3 server store:up did not start: the store-enforced legal-hold tests will fail\n", err)
		} else if err != nil {
			return fmt.Errorf("%s is taken by a process store:up did not start, and it is not a usable S3 server: %w", versitygw.Addr, err)
		}
		fmt.Printf("store is up: an S3 server store:up did not start answers at http://%s; bucket %s is ready\n", versitygw.Addr, versitygw.Bucket)
		return nil
	}

	if err := versitygw.Install(p); err != nil {
		return err
	}
	data, err := versitygw.DataDir(p)
	if err != nil {
		return err
	}
	start := time.Now()
	pid, err := versitygw.Start(ctx, p, data)
	if err != nil {
		return err
	}
	if err := ensureBucket(ctx); err != nil {
		return err
	}
	fmt.Printf("store is up: versitygw pid %d at http://%s in %s, bucket %s, data %s (log %s)\n",
		pid, versitygw.Addr, time.Since(start).Round(time.Millisecond), versitygw.Bucket, data, p.Log)
	return nil
}

// Down stops the versitygw store:up started (SIGTERM via its pid file, SIGKILL after 10 s); a no-op when none runs.
func (Store) Down() error {
	p, err := versitygw.Layout()
	if err != nil {
		return err
	}
	unlock, err := versitygw.Lock(p)
	if err != nil {
		return err
	}
	defer unlock()

	pid, ok := versitygw.Running(p)
	if !ok {
		fmt.Printf("store is not running (no live versitygw in %s)\n", p.PID)
		if versitygw.Listening() {
			fmt.Printf("NOTE: something store:up did not start still listens on %s\n", versitygw.Addr)
		}
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop versitygw (pid %d): %w", pid, err)
	}
	deadline := time.Now().Add(versitygw.StopTimeout)
	for versitygw.Alive(pid) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if versitygw.Alive(pid) {
		fmt.Printf("versitygw (pid %d) ignored SIGTERM for %s: killing it\n", pid, versitygw.StopTimeout)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("kill versitygw (pid %d): %w", pid, err)
		}
	}
	if err := os.Remove(p.PID); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove pid file: %w", err)
	}
	fmt.Printf("store is down: stopped versitygw pid %d\n", pid)
	return nil
}

// ensureBucket creates versitygw.Bucket unless it exists (HEAD, then PUT), with
// the AWS SDK the kernel's store uses, as the root user.
func ensureBucket(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, workspace.DialTimeout)
	defer cancel()
	client := s3.New(s3.Options{
		Region:       versitygw.Region,
		BaseEndpoint: aws.String("http://" + versitygw.Addr),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(versitygw.AccessKey, versitygw.SecretKey, ""),
	})
	_, err := client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(versitygw.Bucket)})
	switch status := httpStatus(err); {
	case err == nil:
		lock, err := client.GetObjectLockConfiguration(ctx, &s3.GetObjectLockConfigurationInput{Bucket: aws.String(versitygw.Bucket)})
		if err != nil || lock.ObjectLockConfiguration == nil || lock.ObjectLockConfiguration.ObjectLockEnabled != types.ObjectLockEnabledEnabled {
			return fmt.Errorf("%w: bucket %s", errNoObjectLock, versitygw.Bucket)
		}
		return nil
	case status != http.StatusNotFound:
		return fmt.Errorf("head bucket %s at %s (wrong credentials? store:up uses %s): %w", versitygw.Bucket, versitygw.Addr, versitygw.AccessKey, err)
	}
	// With S3 Object Lock (and so versioning): a legal hold on an archive's
	// objects makes the store itself refuse to delete them.
	_, err = client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(versitygw.Bucket), ObjectLockEnabledForBucket: aws.Bool(true)})
	// 409 BucketAlreadyOwnedByYou: a concurrent creator won; the bucket is there.
	if err != nil && httpStatus(err) != http.StatusConflict {
		return fmt.Errorf("create bucket %s: %w", versitygw.Bucket, err)
	}
	fmt.Printf("created bucket %s\n", versitygw.Bucket)
	return nil
}

// errNoObjectLock: the bucket exists without S3 Object Lock.
var errNoObjectLock = errors.New("the bucket has no S3 Object Lock")

// restartWithoutData stops the running store and moves its data directory
// aside (kept as data.before-object-lock.<time>), so the next start creates
// the bucket with Object Lock.
func restartWithoutData(p versitygw.Paths, pid int) error {
	fmt.Printf("==> the store's bucket %s has no S3 Object Lock: restarting versitygw with a fresh bucket\n", versitygw.Bucket)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop versitygw (pid %d): %w", pid, err)
	}
	for deadline := time.Now().Add(versitygw.StopTimeout); versitygw.Alive(pid) && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	if versitygw.Alive(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = os.Remove(p.PID)
	data, err := versitygw.DataDir(p)
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
