package archive_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/store"
	"github.com/stretchr/testify/require"
)

// TestProbePausesOnAMarkerItCannotClear: a store that keeps answering the
// create-only put 412 and the read 404 (a delete marker its clears never
// free) makes the probe fail within its own bound, naming the marker, after
// pausing between attempts: before, it retried as fast as the store
// answered (86,861 requests in the 15 s, from one replica).
func TestProbePausesOnAMarkerItCannotClear(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/xml")
		q := r.URL.Query()
		switch {
		case r.Method == http.MethodGet && q.Has("versioning"):
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Status>Enabled</Status></VersioningConfiguration>`)
		case r.Method == http.MethodGet && q.Has("versions"):
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><ListVersionsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><Prefix></Prefix><IsTruncated>false</IsTruncated></ListVersionsResult>`)
		case r.Method == http.MethodPut:
			w.WriteHeader(http.StatusPreconditionFailed)
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>PreconditionFailed</Code><Message>At least one of the pre-conditions you specified did not hold</Message></Error>`)
		default:
			w.WriteHeader(http.StatusNotFound)
			if r.Method != http.MethodHead {
				fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message></Error>`)
			}
		}
	}))
	t.Cleanup(srv.Close)
	u := "s3://b?endpoint=" + url.QueryEscape(srv.URL) + "&region=us-east-1&use_path_style=true&disable_https=true&anonymous=true"
	st, err := store.Open(t.Context(), u, store.WithRequestTimeout(2*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })

	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	err = archive.Probe(ctx, st, "svc")
	require.ErrorIs(t, err, archive.ErrProbe)
	require.False(t, errors.Is(err, context.DeadlineExceeded), "failed by its own bound, not the caller's: %v", err)
	require.ErrorContains(t, err, "delete marker")
	// About 15 s of attempts at one per 25-100 ms, each of 5 requests
	// (put, get, list, list again, versioning once): under 4,000.
	require.Less(t, requests.Load(), int64(4000), "the probe pauses between attempts")
}
