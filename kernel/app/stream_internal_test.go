package app

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStreamBoundedBySilence (issue 22 finding 15): a range stream longer
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
