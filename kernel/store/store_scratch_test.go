//go:build scratch

package store_test

import (
	"testing"

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
