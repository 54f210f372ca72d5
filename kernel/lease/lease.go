// Package lease is the single-runner guard: a PostgreSQL session advisory
// lock taken with pg_try_advisory_lock on a connection taken OUT of the pool
// (pgx Hijack) and closed when the holder is done.
//
// A session lock taken on a pooled connection would stay on that connection
// when it went back to the pool, and every later try-lock by another replica
// would fail forever: retention would silently switch itself off .
// Closing the hijacked connection ends the session, so PostgreSQL
// releases the lock on every exit path: return, error, panic, and a killed
// process or connection.
package lease

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// closeTimeout bounds the graceful close of a lease connection; the lock is
// released by the server when the socket goes away in any case.
const closeTimeout = 5 * time.Second

// Keys of the advisory locks. Each service has its own database, so a fixed
// key fences only the replicas of one service.
const (
	// TransportKey guards the outbox + inbox sweep.
	TransportKey int64 = 0x4352_4149_4701_0001
	// ArchiveKey guards archive passes.
	ArchiveKey int64 = 0x4352_4149_4701_0002
	// HoldsKey orders holds and archive bookings (a transaction-scoped
	// lock, never a lease): an archive pass books each archive holding it
	// shared, a hold's placement holds it exclusive. A hold therefore either
	// commits before a booking reads the active holds (the archive is held
	// from its first moment) or waits for the booking to commit (the hold's
	// own refresh then holds and locks it): never neither.
	HoldsKey int64 = 0x4352_4149_4701_0003
	// JournalKey serializes appends to the journal of acts (a
	// transaction-scoped lock, never a lease): sequence numbers are dense
	// and in commit order (ADR-070).
	JournalKey int64 = 0x4352_4149_4701_0004
	// ScheduleKey serializes records schedule proposals and approvals (a
	// transaction-scoped lock): the version in force changes one at a time.
	ScheduleKey int64 = 0x4352_4149_4701_0005
	// DispositionKey serializes disposition batch freezes and decisions
	// (a transaction-scoped lock): a case is in one open batch at most.
	DispositionKey int64 = 0x4352_4149_4701_0006
)

// Func runs while the lease is held, on the lease's own connection.
type Func func(ctx context.Context, conn *pgx.Conn) error

// ErrNotAcquired is returned by Run when another session holds the lock.
var ErrNotAcquired = errors.New("lease: held by another session")

// TryRun takes the lock for key on a connection hijacked from pool and, if it
// got it, runs fn on that connection. It never blocks waiting for the lock:
// acquired is false when another session holds it, and fn does not run. The
// connection is closed before TryRun returns (or panics), which releases the
// lock.
func TryRun(ctx context.Context, pool *pgxpool.Pool, key int64, fn Func) (acquired bool, err error) {
	return TryRunWithin(ctx, pool, key, 0, fn)
}

// TryRunWithin is TryRun with taking the lease (a connection, the
// try-lock) bounded by within (0: only by ctx): a database that stops
// answering fails it instead of hanging it. fn runs with ctx.
func TryRunWithin(ctx context.Context, pool *pgxpool.Pool, key int64, within time.Duration, fn Func) (acquired bool, err error) {
	actx, cancel := ctx, context.CancelFunc(func() {})
	if within > 0 {
		actx, cancel = context.WithTimeoutCause(ctx, within, fmt.Errorf("lease: the database did not answer within %v", within))
	}
	defer cancel()
	pc, err := pool.Acquire(actx)
	if err != nil {
		return false, fmt.Errorf("lease: acquire connection: %w", err)
	}
	conn := pc.Hijack()
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		// Unlock explicitly first: the server ends a closed session in the
		// background, so without this a runner asking right after TryRun
		// returns could still find the lock held. If the connection is broken
		// the close below is what releases it.
		if acquired && !conn.IsClosed() {
			if conn.PgConn().TxStatus() != 'I' {
				_, _ = conn.Exec(cctx, "ROLLBACK")
			}
			_, _ = conn.Exec(cctx, "SELECT pg_advisory_unlock($1)", key)
		}
		_ = conn.Close(cctx) // closing the socket releases the session lock
	}()
	if err := conn.QueryRow(actx, "SELECT pg_try_advisory_lock($1)", key).Scan(&acquired); err != nil {
		return false, fmt.Errorf("lease: try lock %#x: %w", key, err)
	}
	if !acquired {
		return false, nil
	}
	return true, fn(ctx, conn)
}

// Querier is what Held reads with: a pool, a connection or a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Held reports whether any session of this database holds the advisory lock
// for key, read from pg_locks WITHOUT taking the lock: a dry run or a status
// check must never make a real runner find the lock taken and skip its
// cycle. A session lock on a bigint key is the row with classid = the key's
// high 32 bits, objid = its low 32 bits and objsubid = 1.
func Held(ctx context.Context, db Querier, key int64) (bool, error) {
	var held bool
	err := db.QueryRow(ctx, `SELECT EXISTS (
		SELECT 1 FROM pg_catalog.pg_locks
		WHERE locktype = 'advisory'
		  AND database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
		  AND classid = (($1::bigint >> 32) & 4294967295)::oid
		  AND objid = ($1::bigint & 4294967295)::oid
		  AND objsubid = 1
		  AND granted)`, key).Scan(&held)
	if err != nil {
		return false, fmt.Errorf("lease: read pg_locks for %#x: %w", key, err)
	}
	return held, nil
}

// KeyFor is the advisory lock key of a service's table-level sweep group:
// the FNV-64a hash of "craig-retention/<service>/<table>", stable across
// releases and replicas (the way goose derives its lock id from a name).
// sweep.New refuses two groups with one key, so a collision is caught at
// start-up, never shared silently.
func KeyFor(service, table string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("craig-retention/" + service + "/" + table)) // a hash.Hash never returns an error
	return int64(h.Sum64())                                            // the hash's bits as a signed key (advisory locks take any bigint)
}
