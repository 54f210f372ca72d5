// Package storetest is the conformance suite of kernel/store: every backend
// the tests can reach (fileblob and memblob in unit tests, the real S3 server
// in the scratch suite) runs the same tests, in the manner of
// gocloud.dev/blob/drivertest.
//
// Each run writes under its own scratch prefix,
// retention-archives/test-<random>/…, and deletes what it wrote.
package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/craig/retention/kernel/store"
)

// Sizes and counts of the suite.
const (
	// racers is how many goroutines race to PutCreate one key.
	racers = 16
	// raceRounds repeats the race on fresh keys: a racy backend (fileblob)
	// shows several winners in about 2% of rounds, so one round proves little.
	raceRounds = 8
	// largeObjectBytes (~5 MiB) is a realistic archive batch, above one
	// network buffer.
	largeObjectBytes = 5<<20 + 123
	// digestObjectBytes (~1 MiB) is a typical archive batch, sent as one
	// PutObject on S3.
	digestObjectBytes = 1<<20 + 17
	// bigObjectBytes exceeds the 16 MiB where gocloud's s3blob writer turns
	// multipart (PutCreate sends one PutObject of known length on S3, up to
	// 5 GiB): the archiver's default max_batch_bytes is 32 MiB, so a batch
	// this big is normal and must be refused an existing key like any other.
	bigObjectBytes = 17<<20 + 7
	// opTimeout bounds every test's store calls; the 17 MiB puts are the
	// slowest, under a second on a local server.
	opTimeout = 2 * time.Minute
)

// Option adjusts the suite to what a backend declares it cannot guarantee.
type Option func(*config)

type config struct {
	skipRace string // reason; empty runs the concurrent-create test
}

// SkipConcurrentCreate skips the test that 16 concurrent PutCreate calls on
// one key have exactly one winner, for a backend that declares it cannot
// guarantee it (fileblob checks then renames; measured 4/200 rounds with
// several winners).
func SkipConcurrentCreate(reason string) Option {
	return func(c *config) { c.skipRace = reason }
}

// RunConformance runs every conformance test against stores open returns;
// open is called once per test and must arrange the store's Close.
func RunConformance(t *testing.T, open func(t *testing.T) *store.Store, opts ...Option) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, s *store.Store, sc *scratch)
	}{
		{"PutCreateThenGet", testPutCreateThenGet},
		{"PutCreateExistingKey", testPutCreateExistingKey},
		{"DeleteIfExists", testDeleteIfExists},
		{"GetMissing", testGetMissing},
		{"ConcurrentPutCreateOneWinner", func(t *testing.T, s *store.Store, sc *scratch) {
			if cfg.skipRace != "" {
				t.Skipf("backend cannot guarantee a single winner: %s", cfg.skipRace)
			}
			testConcurrentPutCreate(t, s, sc)
		}},
		{"ArchiveLayoutRoundTrip", testArchiveLayout},
		{"ProbeWriteReadDelete", testProbe},
		{"EmptyObject", testEmptyObject},
		{"LargeObject", testLargeObject},
		{"BigObjectNoOverwrite", testBigObjectNoOverwrite},
		{"PutCreateSHA256", testPutCreateSHA256},
		{"InvalidKeysRefused", testInvalidKeys},
		{"Identity", testIdentity},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			sc := newScratch(t, s)
			tc.fn(t, s, sc)
		})
	}
}

// scratch is one test's prefix; it deletes every key it handed out when the
// test ends.
type scratch struct {
	service string // "test-<random>", a valid service segment
	mu      sync.Mutex
	keys    []string
}

func newScratch(t *testing.T, s *store.Store) *scratch {
	t.Helper()
	sc := &scratch{service: "test-" + randomHex(t, 8)}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		sc.mu.Lock()
		defer sc.mu.Unlock()
		for _, k := range sc.keys {
			if _, err := s.DeleteIfExists(ctx, k); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	return sc
}

// key returns a scratch key retention-archives/test-<random>/<name>,
// registered for deletion.
func (sc *scratch) key(name string) string {
	return sc.track(store.Prefix + sc.service + "/" + name)
}

func (sc *scratch) track(k string) string {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.keys = append(sc.keys, k)
	return k
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
	t.Cleanup(cancel)
	return ctx
}

func testPutCreateThenGet(t *testing.T, s *store.Store, sc *scratch) {
	ctx := ctxFor(t)
	k := sc.key("put-get.json")
	want := []byte(`{"id":"0193","n":1.10}` + "\n")
	if err := s.PutCreate(ctx, k, want, store.ContentTypeJSON); err != nil {
		t.Fatalf("PutCreate: %v", err)
	}
	mustGet(ctx, t, s, k, want)
}

func testPutCreateExistingKey(t *testing.T, s *store.Store, sc *scratch) {
	ctx := ctxFor(t)
	k := sc.key("existing.ndjson")
	original := []byte("{\"row\":1}\n{\"row\":2}\n")
	if err := s.PutCreate(ctx, k, original, store.ContentTypeNDJSON); err != nil {
		t.Fatalf("first PutCreate: %v", err)
	}
	for _, second := range [][]byte{[]byte("overwritten\n"), {}, bytes.Repeat([]byte("x"), 64<<10)} {
		err := s.PutCreate(ctx, k, second, store.ContentTypeNDJSON)
		if !errors.Is(err, store.ErrAlreadyExists) {
			t.Fatalf("PutCreate on an existing key (%d bytes): got %v, want ErrAlreadyExists", len(second), err)
		}
	}
	mustGet(ctx, t, s, k, original)
}

func testDeleteIfExists(t *testing.T, s *store.Store, sc *scratch) {
	ctx := ctxFor(t)
	k := sc.key("delete.json")
	if err := s.PutCreate(ctx, k, []byte("{}"), store.ContentTypeJSON); err != nil {
		t.Fatalf("PutCreate: %v", err)
	}
	deleted, err := s.DeleteIfExists(ctx, k)
	if err != nil || !deleted {
		t.Fatalf("DeleteIfExists(existing) = (%v, %v), want (true, nil)", deleted, err)
	}
	deleted, err = s.DeleteIfExists(ctx, k)
	if err != nil || deleted {
		t.Fatalf("DeleteIfExists(deleted) = (%v, %v), want (false, nil)", deleted, err)
	}
	if _, err := s.Get(ctx, k); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get after delete: got %v, want ErrNotFound", err)
	}
	// The key is free again: a create-only store still allows a new object
	// once the old one was deliberately deleted.
	if err := s.PutCreate(ctx, k, []byte("{\"again\":true}"), store.ContentTypeJSON); err != nil {
		t.Fatalf("PutCreate after delete: %v", err)
	}
}

func testGetMissing(t *testing.T, s *store.Store, sc *scratch) {
	ctx := ctxFor(t)
	_, err := s.Get(ctx, sc.key("never-written.ndjson"))
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get(missing): got %v, want ErrNotFound", err)
	}
	deleted, err := s.DeleteIfExists(ctx, sc.key("never-written-either.ndjson"))
	if err != nil || deleted {
		t.Fatalf("DeleteIfExists(missing) = (%v, %v), want (false, nil)", deleted, err)
	}
}

func testConcurrentPutCreate(t *testing.T, s *store.Store, sc *scratch) {
	ctx := ctxFor(t)
	for round := range raceRounds {
		k := sc.key(fmt.Sprintf("race-%d.ndjson", round))
		payloads := make([][]byte, racers)
		errs := make([]error, racers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range racers {
			payloads[i] = fmt.Appendf(nil, "{\"writer\":%d,\"pad\":%q}\n", i, strings.Repeat("p", 4096))
			wg.Go(func() {
				<-start
				errs[i] = s.PutCreate(ctx, k, payloads[i], store.ContentTypeNDJSON)
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: writers %d and %d both won", round, winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, store.ErrAlreadyExists):
				t.Fatalf("round %d: writer %d: got %v, want nil or ErrAlreadyExists", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no writer won", round)
		}
		mustGet(ctx, t, s, k, payloads[winner])
	}
}

func testArchiveLayout(t *testing.T, s *store.Store, sc *scratch) {
	ctx := ctxFor(t)
	at := time.Date(2026, 11, 20, 23, 59, 59, 0, time.FixedZone("UTC-5", -5*3600)) // 2026-11-21 in UTC
	ids := []string{"0193f1d2-7c4e-7a10-8e2b-5f6a7b8c9d0e", "0193f1d2-7c4e-7a10-8e2b-5f6a7b8c9d0f"}
	for _, id := range ids {
		keys, err := store.NewArchiveKeys(sc.service, "rule_evaluations", at, id)
		if err != nil {
			t.Fatalf("NewArchiveKeys: %v", err)
		}
		wantDir := store.Prefix + sc.service + "/rule_evaluations/2026/11/21/" + id
		if keys.Data != wantDir+".ndjson" || keys.Manifest != wantDir+".manifest.json" {
			t.Fatalf("keys = %+v, want %s.{ndjson,manifest.json}", keys, wantDir)
		}
		sc.track(keys.Data)
		sc.track(keys.Manifest)
		data := []byte("{\"id\":\"" + id + "\"}\n")
		manifest := []byte(`{"format":"ndjson/v1","archive_id":"` + id + `"}`)
		if err := s.PutCreate(ctx, keys.Data, data, store.ContentTypeNDJSON); err != nil {
			t.Fatalf("PutCreate data: %v", err)
		}
		if err := s.PutCreate(ctx, keys.Manifest, manifest, store.ContentTypeJSON); err != nil {
			t.Fatalf("PutCreate manifest: %v", err)
		}
		mustGet(ctx, t, s, keys.Data, data)
		mustGet(ctx, t, s, keys.Manifest, manifest)
	}
}

func testProbe(t *testing.T, s *store.Store, sc *scratch) {
	ctx := ctxFor(t)
	k, err := store.ProbeKey(sc.service)
	if err != nil {
		t.Fatalf("ProbeKey: %v", err)
	}
	sc.track(k)
	// The probe sits next to the table directories of the same service.
	keys, err := store.NewArchiveKeys(sc.service, "audit_log", time.Now(), "0193f1d2-7c4e-7a10-8e2b-5f6a7b8c9d10")
	if err != nil {
		t.Fatalf("NewArchiveKeys: %v", err)
	}
	sc.track(keys.Data)
	if err := s.PutCreate(ctx, keys.Data, []byte("{}\n"), store.ContentTypeNDJSON); err != nil {
		t.Fatalf("PutCreate data: %v", err)
	}
	body := []byte("probe " + time.Now().UTC().Format(time.RFC3339Nano))
	if err := s.PutCreate(ctx, k, body, "text/plain"); err != nil {
		t.Fatalf("PutCreate probe: %v", err)
	}
	mustGet(ctx, t, s, k, body)
	if deleted, err := s.DeleteIfExists(ctx, k); err != nil || !deleted {
		t.Fatalf("DeleteIfExists(probe) = (%v, %v), want (true, nil)", deleted, err)
	}
}

func testEmptyObject(t *testing.T, s *store.Store, sc *scratch) {
	ctx := ctxFor(t)
	k := sc.key("empty.ndjson")
	if err := s.PutCreate(ctx, k, nil, store.ContentTypeNDJSON); err != nil {
		t.Fatalf("PutCreate(empty): %v", err)
	}
	mustGet(ctx, t, s, k, []byte{})
	if err := s.PutCreate(ctx, k, []byte("not empty"), store.ContentTypeNDJSON); !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatalf("PutCreate over an empty object: got %v, want ErrAlreadyExists", err)
	}
	mustGet(ctx, t, s, k, []byte{})
}

func testLargeObject(t *testing.T, s *store.Store, sc *scratch) {
	ctx := ctxFor(t)
	k := sc.key("large.ndjson")
	data := randomBytes(t, largeObjectBytes)
	if err := s.PutCreate(ctx, k, data, store.ContentTypeNDJSON); err != nil {
		t.Fatalf("PutCreate(%d bytes): %v", len(data), err)
	}
	mustGet(ctx, t, s, k, data)
}

func testBigObjectNoOverwrite(t *testing.T, s *store.Store, sc *scratch) {
	ctx := ctxFor(t)
	k := sc.key("big.ndjson")
	data := randomBytes(t, bigObjectBytes)
	if err := s.PutCreate(ctx, k, data, store.ContentTypeNDJSON); err != nil {
		t.Fatalf("PutCreate(%d bytes): %v", len(data), err)
	}
	if err := s.PutCreate(ctx, k, randomBytes(t, bigObjectBytes), store.ContentTypeNDJSON); !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatalf("second PutCreate(%d bytes): got %v, want ErrAlreadyExists", bigObjectBytes, err)
	}
	mustGet(ctx, t, s, k, data)
}

// testPutCreateSHA256: a put with the data's digest stores the data as
// PutCreate does and keeps the create-only rule; a value that is not a
// SHA-256 is refused before anything is sent.
func testPutCreateSHA256(t *testing.T, s *store.Store, sc *scratch) {
	ctx := ctxFor(t)
	k := sc.key("digest.ndjson")
	data := randomBytes(t, digestObjectBytes)
	if err := s.PutCreateSHA256(ctx, k, data, store.ContentTypeNDJSON, digest(data)); err != nil {
		t.Fatalf("PutCreateSHA256: %v", err)
	}
	mustGet(ctx, t, s, k, data)
	other := []byte("other\n")
	if err := s.PutCreateSHA256(ctx, k, other, store.ContentTypeNDJSON, digest(other)); !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatalf("PutCreateSHA256 on an existing key: got %v, want ErrAlreadyExists", err)
	}
	mustGet(ctx, t, s, k, data)

	fresh := sc.key("bad-digest.ndjson")
	for _, bad := range []string{"", "abc", strings.ToUpper(digest(data)), digest(data)[:63] + "g"} {
		if err := s.PutCreateSHA256(ctx, fresh, data, store.ContentTypeNDJSON, bad); !errors.Is(err, store.ErrBadDigest) {
			t.Fatalf("PutCreateSHA256 with digest %q: got %v, want ErrBadDigest", bad, err)
		}
	}
	if _, err := s.Get(ctx, fresh); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after refused puts: got %v, want ErrNotFound", err)
	}
}

func testInvalidKeys(t *testing.T, s *store.Store, sc *scratch) {
	ctx := ctxFor(t)
	for _, k := range []string{
		"",
		"outside/prefix.ndjson",
		store.Prefix,
		store.Prefix + sc.service + "/",
		store.Prefix + sc.service + "//x.ndjson",
		store.Prefix + sc.service + "/../x.ndjson",
		store.Prefix + sc.service + "/./x.ndjson",
		store.Prefix + sc.service + "/x\n.ndjson",
		store.Prefix + sc.service + "/" + strings.Repeat("k", 1025),
	} {
		if err := s.PutCreate(ctx, k, []byte("x"), ""); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("PutCreate(%q): got %v, want ErrInvalidKey", k, err)
		}
		if _, err := s.Get(ctx, k); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("Get(%q): got %v, want ErrInvalidKey", k, err)
		}
		if _, err := s.DeleteIfExists(ctx, k); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("DeleteIfExists(%q): got %v, want ErrInvalidKey", k, err)
		}
	}
}

func testIdentity(t *testing.T, s *store.Store, _ *scratch) {
	id := s.Identity()
	if id.Endpoint == "" {
		t.Errorf("Identity().Endpoint is empty: %+v", id)
	}
	if !s.IsLocalBackend() && id.Bucket == "" {
		t.Errorf("Identity().Bucket is empty on a remote backend: %+v", id)
	}
	if s.MaxObjectBytes() < bigObjectBytes {
		t.Errorf("MaxObjectBytes() = %d, below the suite's largest object", s.MaxObjectBytes())
	}
}

// mustGet fails the test unless key holds exactly want.
func mustGet(ctx context.Context, t *testing.T, s *store.Store, key string, want []byte) {
	t.Helper()
	got, err := s.Get(ctx, key)
	if err != nil {
		t.Fatalf("Get(%s): %v", key, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Get(%s): %d bytes sha256 %s, want %d bytes sha256 %s",
			key, len(got), sum(got), len(want), sum(want))
	}
}

// digest is the full lower-case hex SHA-256 of b.
func digest(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func randomHex(t *testing.T, n int) string {
	return hex.EncodeToString(randomBytes(t, n))
}
