package app_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/migrations"
	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// waitFor polls cond every 20 ms until it holds or the deadline passes.
func waitFor(t *testing.T, what string, deadline time.Duration, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out after %v waiting for %s", deadline, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startServe runs `exchange serve` on db with the broker at amqpURL and
// exchange, on a free loopback port, logging to stderr. It returns the
// address, the channel its exit code arrives on, and the function that
// stops it (cancels its context).
func startServe(t *testing.T, db *kerneltest.DB, amqpURL, exchange string, stderr io.Writer) (addr string, done <-chan int, stop func()) {
	t.Helper()
	addr = freeAddr(t)
	runCtx, cancel := context.WithCancel(context.Background())
	codes := make(chan int, 1)
	go func() {
		codes <- app.Run(runCtx, testSpec(), []string{"serve"}, io.Discard, stderr, []string{
			"CRAIG_EXCHANGE__DATABASE_URL=" + db.URL,
			"CRAIG_EXCHANGE__AMQP_URL=" + amqpURL,
			"CRAIG_EXCHANGE__AMQP_EXCHANGE=" + exchange,
			"CRAIG_EXCHANGE__HTTP_ADDR=" + addr,
		})
	}()
	return addr, codes, cancel
}

// stageEvent stages one case.updated event with payload in its own
// transaction and returns its id.
func stageEvent(t *testing.T, db *kerneltest.DB, payload string) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	id, err := outbox.Stage(ctx, tx, outbox.Envelope{EventType: "case.updated", Payload: []byte(payload)})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	return id
}

// tempExchange names a topic exchange of the test's own, deleted when it
// ends.
func tempExchange(t *testing.T, amqpURL, label string) string {
	t.Helper()
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	name := "craig.test." + label + "." + hex.EncodeToString(suffix)
	t.Cleanup(func() {
		conn, err := amqp.Dial(amqpURL)
		if err != nil {
			return
		}
		defer func() { _ = conn.Close() }()
		if ch, err := conn.Channel(); err == nil {
			_ = ch.ExchangeDelete(name, false, false)
		}
	})
	return name
}

// getter GETs paths of the server at addr: status and body, 0 when it does
// not answer.
func getter(addr string) func(path string) (int, string) {
	return func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, ""
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func TestServeDrainsServesAndStopsGracefully(t *testing.T) {
	t.Parallel()
	db := kerneltest.NewDB(t, testSpec().MigrationSets()...)
	amqpURL := kerneltest.AMQPURL(t)
	exchangeName := tempExchange(t, amqpURL, "serve")

	id := stageEvent(t, db, `{"case":1}`)

	addr, done, stop := startServe(t, db, amqpURL, exchangeName, io.Discard)
	defer stop()

	get := getter(addr)
	waitFor(t, "/healthz", 15*time.Second, func() bool { code, _ := get("/healthz"); return code == http.StatusOK })
	code, _ := get("/readyz")
	require.Equal(t, http.StatusOK, code)
	code, metrics := get("/metrics")
	require.Equal(t, http.StatusOK, code)
	require.True(t, strings.Contains(metrics, "go_goroutines"), "the service registry exposes runtime metrics")

	waitFor(t, "the worker to drain the staged event", 15*time.Second, func() bool {
		return db.Count(t, `SELECT count(*) FROM event_outbox WHERE id = $1 AND published_at IS NOT NULL`, id) == 1
	})

	stop()
	select {
	case c := <-done:
		require.Equal(t, app.ExitOK, c, "a cancelled serve stops gracefully")
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop within 15s of cancellation")
	}
	code, _ = get("/healthz")
	require.Zero(t, code, "the listener is closed after serve returns")
}

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	db := kerneltest.NewDB(t) // an empty database
	env := []string{"CRAIG_EXCHANGE__DATABASE_URL=" + db.URL}
	for round := 1; round <= 2; round++ {
		code := app.Run(context.Background(), testSpec(), []string{"migrate"}, io.Discard, io.Discard, env)
		require.Equal(t, app.ExitOK, code, "round %d", round)
	}
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM information_schema.tables WHERE table_name = 'event_outbox'`))
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM information_schema.tables WHERE table_name = 'exchange_send_jobs'`))
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM goose_transport_version WHERE version_id = 1 AND is_applied`))
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM goose_exchange_version WHERE version_id = 1 AND is_applied`))
}

// TestConcurrentMigrateRuns: concurrent `migrate`
// runs raced (no goose session lock; the keyset-index migration drops and
// recreates indexes). Four runs on one fresh database all exit 0 and leave
// one consistent schema: every migration applied once, every index valid.
func TestConcurrentMigrateRuns(t *testing.T) {
	t.Parallel()
	for round := range 3 {
		db := kerneltest.NewDB(t) // an empty database
		env := []string{"CRAIG_EXCHANGE__DATABASE_URL=" + db.URL}
		const runs = 4
		codes := make(chan int, runs)
		logs := make([]*bytes.Buffer, runs)
		start := make(chan struct{})
		for i := range runs {
			logs[i] = &bytes.Buffer{}
			go func(w io.Writer) {
				<-start
				codes <- app.Run(context.Background(), testSpec(), []string{"migrate"}, io.Discard, w, env)
			}(logs[i])
		}
		close(start)
		for range runs {
			require.Equal(t, app.ExitOK, <-codes, "round %d: %v", round, logs)
		}
		for _, v := range []string{"goose_transport_version", "goose_exchange_version"} {
			require.Zero(t, db.Count(t, `SELECT count(*) FROM (SELECT version_id FROM `+v+` WHERE version_id > 0 GROUP BY version_id HAVING count(*) > 1) d`),
				"round %d: each %s migration applied once", round, v)
		}
		require.Equal(t, int64(len(migrationsOf(t, "transport"))), db.Count(t, `SELECT count(*) FROM goose_transport_version WHERE version_id > 0 AND is_applied`))
		require.Zero(t, db.Count(t, `SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
			JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND NOT (i.indisvalid AND i.indisready)`),
			"round %d: no index left invalid by a concurrent build", round)
		require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM pg_indexes WHERE indexname = 'event_outbox_published_created_idx'`))
		require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM pg_proc WHERE proname = 'retention_refuse_update'`))
	}
}

// migrationsOf lists the migration files of one embedded set.
func migrationsOf(t *testing.T, name string) []string {
	t.Helper()
	require.Equal(t, migrations.TransportSetName, name)
	entries, err := fs.Glob(migrations.Transport().FS, "*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, entries)
	return entries
}
