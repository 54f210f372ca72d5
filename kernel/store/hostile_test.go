package store_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/store"
)

// TestOpenRefusesUserinfo: credentials inside the
// bucket URL or its endpoint were accepted and copied into probe output,
// ledger rows, events and manifests. The error never repeats them.
func TestOpenRefusesUserinfo(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"s3://user:Sup3rS3cret@bucket?region=us-east-1",
		"s3://bucket?endpoint=http://user:Sup3rS3cret@127.0.0.1:7070&region=us-east-1",
		"s3://bucket?endpoint=http%3A%2F%2Fuser%3ASup3rS3cret%40127.0.0.1%3A7070&region=us-east-1",
	} {
		_, err := store.Open(t.Context(), u)
		require.ErrorIs(t, err, store.ErrBadURL, u)
		require.ErrorContains(t, err, "user info")
		require.NotContains(t, err.Error(), "Sup3rS3cret")
		require.ErrorIs(t, store.CheckURL(u), store.ErrBadURL)
	}
}

// TestOpenDoesNotEchoOptionValues: an unknown
// URL option was echoed with its value.
func TestOpenDoesNotEchoOptionValues(t *testing.T) {
	t.Parallel()
	_, err := store.Open(t.Context(), "s3://bucket?region=us-east-1&secret_key=Sup3rS3cret&endpoint=http://127.0.0.1:1")
	require.ErrorIs(t, err, store.ErrBadURL)
	require.NotContains(t, err.Error(), "Sup3rS3cret")
	require.ErrorContains(t, err, "secret_key", "the option is named")
}

// TestRequestTimeout: a store that accepts connections and
// never answers hung every request. Each request now fails within its
// bound with ErrTimeout naming the endpoint.
func TestRequestTimeout(t *testing.T) {
	t.Parallel()
	addr := kerneltest.SilentServer(t)
	u := "s3://bucket?endpoint=http://" + addr + "&region=us-east-1&use_path_style=true&disable_https=true&anonymous=true"
	const bound = 300 * time.Millisecond
	st, err := store.Open(t.Context(), u, store.WithRequestTimeout(bound))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })

	ops := map[string]func(context.Context) error{
		"PutCreate": func(ctx context.Context) error {
			return st.PutCreate(ctx, "retention-archives/t/x.ndjson", []byte("x\n"), store.ContentTypeNDJSON)
		},
		"Get": func(ctx context.Context) error { _, err := st.Get(ctx, "retention-archives/t/x.ndjson"); return err },
		"DeleteIfExists": func(ctx context.Context) error {
			_, err := st.DeleteIfExists(ctx, "retention-archives/t/x.ndjson")
			return err
		},
	}
	for name, op := range ops {
		start := time.Now()
		err := op(context.Background())
		took := time.Since(start)
		require.Error(t, err, name)
		require.True(t, errors.Is(err, store.ErrTimeout), "%s: %v", name, err)
		require.Contains(t, err.Error(), addr, "%s: the error names what did not answer", name)
		require.Less(t, took, 20*bound, "%s took %v", name, took)
	}
}

// TestGetCutMidBody: a store that answers a read and
// then cannot give the object's bytes whole (damaged on its disk, a body
// cut short) is ErrUnreadable, told apart from a missing object and a
// timeout.
func TestGetCutMidBody(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"id": 1}`))
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				_ = c.Close()
			}
		}
	}))
	t.Cleanup(srv.Close)
	st, err := store.Open(t.Context(), "s3://bucket?endpoint="+srv.URL+"&region=us-east-1&use_path_style=true&disable_https=true&anonymous=true",
		store.WithRequestTimeout(5*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	_, err = st.Get(t.Context(), "retention-archives/t/x.ndjson")
	require.ErrorIs(t, err, store.ErrUnreadable)
	require.NotErrorIs(t, err, store.ErrNotFound)
	require.NotErrorIs(t, err, store.ErrTimeout)
}

// TestOpenRefusesPrefix: with gocloud's prefix option, reads went through
// the prefix and the versioned calls did not, so a put-back object of a
// destroyed archive was readable while VersionCount said none was left.
func TestOpenRefusesPrefix(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"s3://bucket?region=us-east-1&prefix=tenant/", "file:///tmp/x?prefix=a/", "mem://b?prefix=p"} {
		_, err := store.Open(t.Context(), u)
		require.ErrorIs(t, err, store.ErrBadURL, u)
		require.ErrorContains(t, err, "prefix")
	}
}
