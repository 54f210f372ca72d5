package archive

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/kernel/store"
)

// ErrLocalBackend is returned (wrapped) when the archiver is pointed at the
// local-directory backend: one machine's disk is neither immutable nor
// cross-service durable (D9), and gocloud's fileblob is not safe under
// concurrent conditional writers.
var ErrLocalBackend = errors.New("archive: the local-directory store backend is for tests only")

// ErrProbe is returned (wrapped) when the boot probe fails.
var ErrProbe = errors.New("archive: store probe failed")

// Probe writes, reads back and deletes retention-archives/<service>/.probe
// (D10). A leftover probe object from an interrupted boot is removed first.
func Probe(ctx context.Context, st *store.Store, service string) error {
	if st.IsLocalBackend() {
		return fmt.Errorf("%w: %s", ErrLocalBackend, st.Identity().Endpoint)
	}
	key, err := store.ProbeKey(service)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrProbe, err)
	}
	if _, err := st.DeleteIfExists(ctx, key); err != nil {
		return fmt.Errorf("%w: clear %s: %w", ErrProbe, key, err)
	}
	want := []byte("craig retention probe " + time.Now().UTC().Format(time.RFC3339Nano))
	if err := st.PutCreate(ctx, key, want, "text/plain"); err != nil {
		return fmt.Errorf("%w: write %s: %w", ErrProbe, key, err)
	}
	got, err := st.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("%w: read %s: %w", ErrProbe, key, err)
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("%w: %s read back %d bytes that differ from the %d written", ErrProbe, key, len(got), len(want))
	}
	if deleted, err := st.DeleteIfExists(ctx, key); err != nil || !deleted {
		return fmt.Errorf("%w: delete %s (deleted=%v): %w", ErrProbe, key, deleted, err)
	}
	return nil
}

// Boot is the archiver's start-up gate. Disabled: it returns (nil, nil) and
// touches no store. Enabled: it opens the store, checks max_batch_bytes
// against the store's cap, refuses the local backend and runs the probe;
// any failure is an error naming the knobs and their environment variables.
func Boot(ctx context.Context, service string, s Settings) (*store.Store, error) {
	if !s.Enabled {
		return nil, nil
	}
	refuse := func(err error) error {
		return fmt.Errorf("archiver refused to start: %w (archive.enabled=true, env %s; store archive.store.url, env %s; set archive.enabled=false to run without archiving)",
			err, settings.EnvVar(service, "archive.enabled"), settings.EnvVar(service, "archive.store.url"))
	}
	st, err := store.Open(ctx, s.Store.URL)
	if err != nil {
		return nil, refuse(err)
	}
	if s.MaxBatchBytes > st.MaxObjectBytes() {
		_ = st.Close()
		return nil, refuse(fmt.Errorf("archive.max_batch_bytes=%d (env %s) exceeds the store's object cap %d",
			s.MaxBatchBytes, settings.EnvVar(service, "archive.max_batch_bytes"), st.MaxObjectBytes()))
	}
	if err := Probe(ctx, st, service); err != nil {
		_ = st.Close()
		return nil, refuse(err)
	}
	return st, nil
}
