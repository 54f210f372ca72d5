package store_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

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
