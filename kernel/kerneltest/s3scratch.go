package kerneltest

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"gocloud.dev/blob"

	"github.com/craig/retention/kernel/store"
	_ "gocloud.dev/blob/s3blob" // s3:// (the real store)
)

// s3ScratchTimeout bounds the listing and deletes of one scratch prefix.
const s3ScratchTimeout = 2 * time.Minute

// S3Scratch is one test's scratch prefix on the real S3 server: every key an
// archive engine configured with Service writes lands under
// retention-archives/<Service>/, and the prefix is emptied when the test ends.
type S3Scratch struct {
	// URL is the bucket URL (S3URL).
	URL string
	// Service is a fresh key segment, "t" + 16 lowercase hex digits: use it
	// as the engine's Config.Service.
	Service string
	bucket  *blob.Bucket
}

// NewS3Scratch returns a scratch prefix on the S3 server of S3URL (failing
// under CI=true when it is unreachable) and deletes everything under it
// when the test ends, including objects the test never learnt the keys of
// (an aborted pass's orphans).
func NewS3Scratch(t testing.TB) *S3Scratch {
	t.Helper()
	raw := S3URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), s3ScratchTimeout)
	defer cancel()
	b, err := blob.OpenBucket(ctx, raw)
	if err != nil {
		t.Fatalf("kerneltest: open %s: %v", raw, err)
	}
	s := &S3Scratch{URL: raw, Service: "t" + randomHex(t, 8), bucket: b}
	t.Cleanup(func() {
		defer func() { _ = b.Close() }()
		cctx, ccancel := context.WithTimeout(context.Background(), s3ScratchTimeout)
		defer ccancel()
		keys, err := s.list(cctx)
		if err != nil {
			t.Errorf("kerneltest: cleanup of %s: %v", s.Prefix(), err)
		}
		st, err := store.Open(cctx, raw)
		if err != nil {
			t.Errorf("kerneltest: cleanup: open %s: %v", raw, err)
			return
		}
		defer func() { _ = st.Close() }()
		for _, k := range keys {
			// Every version (a versioned bucket keeps them); an object a
			// failed test left under a legal hold stays, refused.
			if _, err := st.DeleteIfExists(cctx, k); err != nil && !errors.Is(err, store.ErrLocked) {
				t.Errorf("kerneltest: cleanup: delete %s: %v", k, err)
			}
		}
	})
	return s
}

// Prefix is retention-archives/<Service>/.
func (s *S3Scratch) Prefix() string { return "retention-archives/" + s.Service + "/" }

// Keys returns every key under the prefix, sorted.
func (s *S3Scratch) Keys(t testing.TB) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s3ScratchTimeout)
	defer cancel()
	keys, err := s.list(ctx)
	if err != nil {
		t.Fatalf("kerneltest: list %s: %v", s.Prefix(), err)
	}
	return keys
}

func (s *S3Scratch) list(ctx context.Context) ([]string, error) {
	var keys []string
	it := s.bucket.List(&blob.ListOptions{Prefix: s.Prefix()})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return keys, err
		}
		if !obj.IsDir {
			keys = append(keys, obj.Key)
		}
	}
	slices.Sort(keys)
	return keys, nil
}
