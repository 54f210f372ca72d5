package kerneltest

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/craig/retention/kernel/settings"
)

// EnvReplicaURL names a streaming replica of the test server;
// DefaultReplicaURL is the one `go tool mage replica:up` starts.
const (
	EnvReplicaURL     = "CRAIG_TEST_REPLICA_URL"
	DefaultReplicaURL = "postgres://postgres@127.0.0.1:5433/postgres?sslmode=disable"
	// NoReplica as CRAIG_TEST_REPLICA_URL says there is none: the replica
	// tests skip (go tool mage test:scratch sets it).
	NoReplica = "none"
)

// Replica connects to a streaming replica of the test server
// (CRAIG_TEST_REPLICA_URL, default replica:up's) and checks that it is one:
// in recovery. A missing replica is Optional: a failure under CI=true, a skip
// elsewhere. The
// connection is closed when the test ends, after the replica's replay is
// resumed (a test that paused it must never leave it paused).
func Replica(t testing.TB) *pgx.Conn {
	t.Helper()
	NeedsServer(t, "a streaming replica")
	raw := os.Getenv(EnvReplicaURL)
	switch raw {
	case "":
		raw = DefaultReplicaURL
	case NoReplica:
		t.Skipf("no streaming replica (%s=%s)", EnvReplicaURL, NoReplica)
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, raw)
	if err != nil {
		Optional(t, "a streaming replica at "+settings.Redact(raw)+" (go tool mage replica:up)", err)
		return nil
	}
	var standby bool
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&standby); err != nil || !standby {
		_ = conn.Close(context.Background())
		Optional(t, "a streaming replica at "+settings.Redact(raw), errors.Join(err, errors.New("the server there is not in recovery")))
		return nil
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = conn.Exec(ctx, "SELECT pg_wal_replay_resume()")
		_ = conn.Close(ctx)
	})
	return conn
}
