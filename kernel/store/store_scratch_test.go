package store_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/kernel/store/storetest"
)

// TestConformanceS3 runs the suite against the real S3 server
// (CRAIG_TEST_S3_URL, default the local versitygw of `go tool mage store:up`).
func TestConformanceS3(t *testing.T) {
	bucketURL := kerneltest.S3URL(t)
	storetest.RunConformance(t, func(t *testing.T) *store.Store {
		s := openURL(t, bucketURL)
		if s.IsLocalBackend() {
			t.Fatalf("%s is a local backend, not an S3 server", bucketURL)
		}
		return s
	})
}

// TestPutCreateSHA256WrongDigestS3: the request is signed with the caller's
// digest (over HTTP and HTTPS alike); a digest of other bytes makes the
// server refuse the put, and nothing is stored.
func TestPutCreateSHA256WrongDigestS3(t *testing.T) {
	bucketURL := kerneltest.S3URL(t)
	s := openURL(t, bucketURL)
	ctx := context.Background()
	keys, err := store.NewArchiveKeys("test-digest", "digest", time.Now(), uuid.NewString())
	require.NoError(t, err)
	data := []byte("{\"id\":1}\n")
	wrong := sha256.Sum256([]byte("something else"))
	err = s.PutCreateSHA256(ctx, keys.Data, data, store.ContentTypeNDJSON, hex.EncodeToString(wrong[:]))
	require.Error(t, err)
	require.NotErrorIs(t, err, store.ErrAlreadyExists)
	_, err = s.Get(ctx, keys.Data)
	require.ErrorIs(t, err, store.ErrNotFound, "nothing stored")
}

// TestDestroyAllVersionsRacingDestroyersS3: eight clients destroy the same
// key, of several versions and a delete marker, at once (replicas clearing
// their probe key together): each succeeds and nothing of the key is left.
// The store refuses a version another delete took first (400
// InvalidArgument on versitygw) and can list for a moment a version just
// deleted; the destroy settles both by listing again, and fails only if
// what it deleted is still listed after its passes.
func TestDestroyAllVersionsRacingDestroyersS3(t *testing.T) {
	bucketURL := kerneltest.S3URL(t)
	s := openURL(t, bucketURL)
	ctx := t.Context()
	raw, err := blob.OpenBucket(ctx, bucketURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = raw.Close() })
	const rounds, destroyers = 5, 8
	for round := range rounds {
		key := "retention-archives/test-destroy/" + uuid.NewString() + "/object"
		for v := range 3 + round {
			require.NoError(t, raw.WriteAll(ctx, key, fmt.Appendf(nil, "version %d", v), nil))
		}
		require.NoError(t, raw.Delete(ctx, key)) // a delete marker on top
		errs := make([]error, destroyers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range destroyers {
			wg.Go(func() {
				<-start
				st, err := store.Open(ctx, bucketURL)
				if err != nil {
					errs[i] = err
					return
				}
				defer func() { _ = st.Close() }()
				_, errs[i] = st.DestroyAllVersions(ctx, key)
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "round %d destroyer %d", round, i)
		}
		n, err := s.VersionCount(ctx, key)
		require.NoError(t, err)
		require.Zero(t, n, "round %d: nothing of the key is left", round)
	}
}
