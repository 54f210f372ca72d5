package archive

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/kernel/store"
	"github.com/google/uuid"
)

// ErrLocalBackend is returned (wrapped) when the archiver is pointed at the
// local-directory backend: one machine's disk is neither immutable nor
// cross-service durable, and gocloud's fileblob is not safe under
// concurrent conditional writers.
var ErrLocalBackend = errors.New("archive: the local-directory store backend is for tests only")

// ErrProbe is returned (wrapped) when the boot probe fails.
var ErrProbe = errors.New("archive: store probe failed")

// Probe timing. Replicas of one service booting together probe the same
// key; a prober never deletes another's live object, it waits for it.
const (
	// probeStaleAfter is the age past which a probe object is a leftover
	// of an interrupted boot (a live probe lasts milliseconds).
	probeStaleAfter = 10 * time.Second
	// probeWait bounds the wait for the key: a leftover written just
	// before an interrupted boot becomes stale within it.
	probeWait = probeStaleAfter + 5*time.Second
	// probeBackoff is the base of the jittered pause between attempts.
	probeBackoff = 25 * time.Millisecond
)

// BootTimeout bounds the whole boot (open, probe with its waits and
// retries): a store that accepts connections and never answers refuses the
// boot with an error instead of hanging it. It covers probeWait and a few
// bounded requests.
const BootTimeout = 2 * time.Minute

// probePrefix starts every probe object's content, followed by its write
// time (RFC 3339) and a random id.
const probePrefix = "craig retention probe "

// Probe writes, reads back and deletes retention-archives/<service>/.probe.
// The key is taken with a create-only put: while another prober's
// live object holds it (replicas booting together), Probe waits for it, and
// a leftover of an interrupted boot (older than probeStaleAfter) is removed.
// An attempt whose object another prober removed (clearing what it took for
// a leftover) is retried.
func Probe(ctx context.Context, st *store.Store, service string) error {
	if st.IsLocalBackend() {
		return fmt.Errorf("%w: %s", ErrLocalBackend, st.Identity().Endpoint)
	}
	key, err := store.ProbeKey(service)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrProbe, err)
	}
	deadline := time.Now().Add(probeWait)
	held := heldByProber
	for attempt := 0; ; attempt++ {
		if attempt > 0 && time.Now().After(deadline) {
			return fmt.Errorf("%w: %s stayed %s for %v", ErrProbe, key, held, probeWait)
		}
		want := []byte(probePrefix + time.Now().UTC().Format(time.RFC3339Nano) + " " + uuid.NewString())
		err := st.PutCreate(ctx, key, want, "text/plain")
		if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrAlreadyExists) {
			if held, err = waitForKey(ctx, st, key, err); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("%w: write %s: %w", ErrProbe, key, err)
		}
		got, err := st.Get(ctx, key)
		switch {
		case errors.Is(err, store.ErrNotFound):
			continue // removed under us by a prober clearing a leftover
		case err != nil:
			return fmt.Errorf("%w: read %s: %w", ErrProbe, key, err)
		case !bytes.Equal(got, want):
			if probeStale(got, time.Now()) || !bytes.HasPrefix(got, []byte(probePrefix)) {
				return fmt.Errorf("%w: %s read back %d bytes that differ from the %d written", ErrProbe, key, len(got), len(want))
			}
			continue // another prober's object replaced ours after a removal
		}
		deleted, err := st.DeleteIfExists(ctx, key)
		switch {
		case err != nil:
			return fmt.Errorf("%w: delete %s: %w", ErrProbe, key, err)
		case !deleted:
			continue // removed under us: prove the delete again
		}
		return nil
	}
}

// What held the probe key, for the error when it stayed held.
const (
	heldByProber = "held by other probers"
	heldByMarker = "taken for a create-only put while reading as absent (a delete marker or a write the clears did not free)"
)

// waitForKey handles a probe write that found the key taken (putErr is
// ErrConflict or ErrAlreadyExists): another replica's write or delete in
// flight, or its live probe, is waited for; a leftover of an interrupted
// boot, or a delete marker over the key, is cleared. Every outcome pauses
// before the next attempt (a marker the store keeps would otherwise be
// retried as fast as the store answers, by every replica); held says what
// held the key.
func waitForKey(ctx context.Context, st *store.Store, key string, putErr error) (held string, err error) {
	held = heldByProber
	if errors.Is(putErr, store.ErrAlreadyExists) {
		content, err := st.Get(ctx, key)
		switch {
		case errors.Is(err, store.ErrNotFound):
			// Its prober just finished, or a plain DELETE left a delete
			// marker over the key that the store still counts as taken
			// (versitygw answers a create-only PUT 412 and a GET 404 then,
			// forever). Clearing every version of the probe key frees
			// both; a live prober whose object this removes finds it gone
			// and tries again.
			if _, err := st.DeleteIfExists(ctx, key); err != nil {
				return held, fmt.Errorf("%w: clear %s: %w", ErrProbe, key, err)
			}
			held = heldByMarker
		case err != nil:
			return held, fmt.Errorf("%w: read %s: %w", ErrProbe, key, err)
		case probeStale(content, time.Now()):
			if _, err := st.DeleteIfExists(ctx, key); err != nil {
				return held, fmt.Errorf("%w: clear leftover %s: %w", ErrProbe, key, err)
			}
		}
	}
	if err := probePause(ctx); err != nil {
		return held, fmt.Errorf("%w: waiting for %s: %w", ErrProbe, key, err)
	}
	return held, nil
}

// probePause sleeps a jittered probeBackoff..4×probeBackoff.
func probePause(ctx context.Context) error {
	t := time.NewTimer(probeBackoff + time.Duration(rand.Int64N(int64(3*probeBackoff))))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// probeStale reports whether a probe object is a leftover: not written by
// Probe, or written more than probeStaleAfter before (or after) now.
func probeStale(content []byte, now time.Time) bool {
	rest, ok := strings.CutPrefix(string(content), probePrefix)
	if !ok {
		return true
	}
	stamp, _, _ := strings.Cut(rest, " ")
	at, err := time.Parse(time.RFC3339Nano, stamp)
	if err != nil {
		return true
	}
	age := now.Sub(at)
	return age > probeStaleAfter || age < -probeStaleAfter
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
	ctx, cancel := context.WithTimeoutCause(ctx, BootTimeout, fmt.Errorf("%w: the store did not answer within %v", store.ErrTimeout, BootTimeout))
	defer cancel()
	st, err := store.Open(ctx, s.Store.URL, store.WithRequestTimeout(s.Store.RequestTimeout))
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
		if cause := context.Cause(ctx); cause != nil && errors.Is(cause, store.ErrTimeout) {
			err = fmt.Errorf("%w: %w", cause, err)
		}
		return nil, refuse(err)
	}
	return st, nil
}
