package app

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/sweep"
)

// TestStreamBoundedBySilence: a range stream longer
// than the server's write timeout is not cut (a 2-minute timeout cut a
// 157-second stream mid-line): each write gets StreamSilence from its start.
// Here the write timeout is 150 ms and the stream lasts 6 x 60 ms.
func TestStreamBoundedBySilence(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &countingWriter{w: w}
		for i := range 6 {
			time.Sleep(60 * time.Millisecond) // a slow object read between lines
			if _, err := fmt.Fprintf(cw, "{\"line\": %d}\n", i); err != nil {
				return
			}
			http.NewResponseController(w).Flush() //nolint:errcheck // best effort
		}
	}))
	srv.Config.WriteTimeout = 150 * time.Millisecond
	srv.Start()
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	var lines int
	for sc.Scan() {
		lines++
	}
	require.Equal(t, 6, lines, "every line of the stream arrived (%v)", sc.Err())
}

// TestSweepTextReportNotes: the text report of
// sweep --once says what the JSON says beyond its columns: partitions
// dropped, kept and not retired, pauses, and a pause budget that ran out.
func TestSweepTextReportNotes(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	require.NoError(t, writeTable(&b, sweep.Report{LockAcquired: true, Tables: []sweep.TableReport{
		{Table: "event_outbox", Group: "transport", Deleted: 10, PartitionsDropped: []string{"p1", "p2"}, PartitionsKept: []string{"p3"},
			PausedSeconds: map[string]float64{"replica_lag": 60}, PauseExhausted: "replica_lag"},
		{Table: "exchange_send_jobs", Group: "exchange_send_jobs", PartitionsNotRetired: "partition_key_mismatch"},
		{Table: "event_inbox", Group: "transport"},
	}}))
	out := b.String()
	require.Contains(t, out, "dropped 2 partition(s): p1,p2")
	require.Contains(t, out, "kept (rows that must stay) 1 partition(s): p3")
	require.Contains(t, out, "paused 60.0s (replica_lag)")
	require.Contains(t, out, "pause budget exhausted (replica_lag)")
	require.Contains(t, out, "partitions not retired: partition_key_mismatch")
}
