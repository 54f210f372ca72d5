package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/sweep"
	"github.com/craig/retention/migrations"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// hostileDead inserts a dead letter created createdAgo and dead-lettered
// deadAgo (SQL intervals).
func hostileDead(t *testing.T, db *kerneltest.DB, eventType, createdAgo, deadAgo string) uuid.UUID {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	db.Exec(t, `INSERT INTO event_outbox (id, event_type, payload, created_at, dead_lettered_at, attempts, last_error, last_attempt_at)
		VALUES ($1, $2, '{"child":"Jane Doe"}', now() - $3::interval, now() - $4::interval, 25, 'broker nacked', now() - $4::interval)`,
		id, eventType, createdAgo, deadAgo)
	return id
}

// TestHostileHungBrokerCostsNoAttempt: a broker that accepts the publish
// but never confirms (a stalled broker, a quorum queue without its
// majority, a black-holed network) says nothing about the row. Guarantee 3:
// an unreachable broker costs no attempt. A healthy row must not be
// counted, let alone dead-lettered, because the broker stopped answering.
func TestHostileHungBrokerCostsNoAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	id := stage(t, db, "rules.evaluated")
	hung := &fakePublisher{fail: func(ctx context.Context, _ outbox.Message) error {
		<-ctx.Done() // the broker never confirms
		return fmt.Errorf("rabbitmq publish: waiting for the broker's confirm: %w", ctx.Err())
	}}
	_, logger := newLogRecorder()
	d := &outbox.Drainer{Pool: db.Pool, Publisher: hung, Logger: logger, MaxAttempts: 2,
		PublishTimeout: 20 * time.Millisecond, RetryBackoff: time.Nanosecond}
	for range 3 {
		_, _ = d.DrainOnce(ctx)
	}
	var attempts int
	var dead bool
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT attempts, dead_lettered_at IS NOT NULL FROM event_outbox WHERE id = $1", id).Scan(&attempts, &dead))
	require.False(t, dead, "a healthy row was dead-lettered only because the broker stopped answering")
	require.Zero(t, attempts, "a broker that stops answering cost the row %d attempt(s)", attempts)
}

// TestHostileTwoDrainersCountEachRefusalOnce: two replicas drain the same
// outbox at once; the poison row is offered exactly MaxAttempts times in
// all and then never again; every good row is published exactly once.
func TestHostileTwoDrainersCountEachRefusalOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	poison := stage(t, db, "rules.poison")
	var good []uuid.UUID
	for range 40 {
		good = append(good, stage(t, db, "rules.evaluated"))
	}
	pub := &fakePublisher{fail: func(_ context.Context, m outbox.Message) error {
		if m.ID == poison {
			return errors.New("nacked")
		}
		time.Sleep(time.Millisecond)
		return nil
	}}
	_, logger := newLogRecorder()
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := &outbox.Drainer{Pool: db.Pool, Publisher: pub, Logger: logger, BatchSize: 3, MaxAttempts: 4, RetryBackoff: time.Nanosecond}
			for range 60 {
				if _, err := d.DrainOnce(ctx); err != nil {
					t.Errorf("drain: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	calls := pub.ids()
	require.Equal(t, 4, count(calls, poison))
	for _, id := range good {
		require.Equal(t, 1, count(calls, id))
	}
	require.Equal(t, int64(1), db.Count(t, "SELECT count(*) FROM event_outbox WHERE id = $1 AND attempts = 4 AND dead_lettered_at IS NOT NULL AND published_at IS NULL", poison))
}

// TestHostileRetryRacesTwoDrainers: operators retry every dead letter
// while two drainers run; each is then published exactly once, and none is
// offered while it is still dead.
func TestHostileRetryRacesTwoDrainers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	var dead []uuid.UUID
	for i := range 30 {
		dead = append(dead, hostileDead(t, db, "rules.evaluated", fmt.Sprintf("%d minutes", 60-i), "10 minutes"))
	}
	var offeredDead atomic.Int64
	// The publisher's check has a pool of its own: on the test's pool, the
	// retriers waiting for the rows a drainer's claim holds could take every
	// connection, and the check (inside that claim) would wait for one
	// forever.
	checker, err := pgxpool.New(ctx, db.URL)
	require.NoError(t, err)
	t.Cleanup(checker.Close)
	pub := &fakePublisher{fail: func(_ context.Context, m outbox.Message) error {
		var isDead bool
		if err := checker.QueryRow(context.Background(), "SELECT dead_lettered_at IS NOT NULL FROM event_outbox WHERE id = $1", m.ID).Scan(&isDead); err != nil {
			t.Errorf("check %s: %v", m.ID, err)
		} else if isDead {
			offeredDead.Add(1)
		}
		return nil
	}}
	_, logger := newLogRecorder()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := &outbox.Drainer{Pool: db.Pool, Publisher: pub, Logger: logger, BatchSize: 2, MaxAttempts: 3}
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := d.DrainOnce(ctx); err != nil {
					t.Errorf("drain: %v", err)
					return
				}
			}
		}()
	}
	var rw sync.WaitGroup
	for w := range 3 {
		rw.Add(1)
		go func() {
			defer rw.Done()
			for _, id := range dead {
				_, err := outbox.RetryDeadLetter(ctx, db.Pool, id, fmt.Sprintf("ops:op%d", w))
				var nd *outbox.NotDeadLetteredError
				if err != nil && !errors.As(err, &nd) {
					t.Errorf("retry %s: %v", id, err)
				}
			}
		}()
	}
	rw.Wait()
	require.Eventually(t, func() bool {
		return db.Count(t, "SELECT count(*) FROM event_outbox WHERE published_at IS NULL") == 0
	}, 20*time.Second, 20*time.Millisecond)
	close(stop)
	wg.Wait()
	calls := pub.ids()
	for _, id := range dead {
		require.Equal(t, 1, count(calls, id), "a retried dead letter is published exactly once")
	}
	require.Zero(t, offeredDead.Load(), "a dead letter was offered to the broker")
	require.Zero(t, db.Count(t, "SELECT count(*) FROM event_outbox WHERE retried_by IS NULL OR retried_by !~ '^ops:op[0-2]$'"))
}

// TestHostileSweepRacesRetry: the dead-letter sweep runs while a retry holds
// the row (its UPDATE not yet committed). The retried row is no longer a
// dead letter when the sweep gets the row: it must survive as pending.
func TestHostileSweepRacesRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	id := hostileDead(t, db, "rules.evaluated", "400 days", "100 days")
	other := hostileDead(t, db, "rules.evaluated", "400 days", "100 days")

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = outbox.RetryDeadLetter(ctx, tx, id, "ops:alice")
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		_, err := prune.PruneTable(ctx, db.Pool, transportPolicies(30)[sweep.OutboxDeadLetters])
		done <- err
	}()
	// Let the sweep reach the locked row, then commit the retry.
	require.Eventually(t, func() bool {
		return db.Count(t, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()") > 0
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, tx.Commit(ctx))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the sweep never finished")
	}
	require.Equal(t, int64(1), db.Count(t, "SELECT count(*) FROM event_outbox WHERE id = $1 AND dead_lettered_at IS NULL AND published_at IS NULL AND retried_by = 'ops:alice'", id),
		"the retried row must survive the racing dead-letter sweep")
	require.Zero(t, db.Count(t, "SELECT count(*) FROM event_outbox WHERE id = $1", other), "the other aged dead letter is swept")
}

// TestHostileDeadLetterSweepInAnotherTimeZone: the database's TimeZone is
// Pacific/Kiritimati (UTC+14) and its DateStyle 'SQL, DMY'; dead letters are
// swept by dead_lettered_at, never before the window, and nothing else goes.
func TestHostileDeadLetterSweepInAnotherTimeZone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	db.Exec(t, fmt.Sprintf(`ALTER DATABASE %s SET TimeZone = 'Pacific/Kiritimati'`, pgx.Identifier{db.Name}.Sanitize()))
	db.Exec(t, fmt.Sprintf(`ALTER DATABASE %s SET DateStyle = 'SQL, DMY'`, pgx.Identifier{db.Name}.Sanitize()))
	db.Pool.Reset() // new sessions take the database's settings

	young := hostileDead(t, db, "dead.young", "400 days", "6 days 23 hours") // created long ago, dead < 7 days
	edge := hostileDead(t, db, "dead.edge", "400 days", "6 days 23 hours 59 minutes")
	old := hostileDead(t, db, "dead.old", "8 days", "7 days 1 hour")
	db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at) VALUES ('pending.old', '{}', now() - interval '400 days')`)
	db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at, published_at) VALUES ('published.young', '{}', now() - interval '1 day', now())`)

	rep, err := prune.PruneTable(ctx, db.Pool, transportPolicies(7)[sweep.OutboxDeadLetters])
	require.NoError(t, err)
	require.Equal(t, int64(1), rep.Deleted)
	require.Zero(t, db.Count(t, "SELECT count(*) FROM event_outbox WHERE id = $1", old))
	require.Equal(t, int64(2), db.Count(t, "SELECT count(*) FROM event_outbox WHERE id = ANY($1)", []uuid.UUID{young, edge}))
	require.Equal(t, int64(4), db.Count(t, "SELECT count(*) FROM event_outbox"))

	// The listing's ages do not depend on the session's zone either.
	page, err := outbox.ListDeadLetters(ctx, db.Pool, uuid.Nil, 0)
	require.NoError(t, err)
	require.Len(t, page.DeadLetters, 2)
	wantDead := map[uuid.UUID]float64{young: (6*24 + 23) * 3600, edge: (6*24+23)*3600 + 59*60}
	for _, dl := range page.DeadLetters {
		require.InDelta(t, wantDead[dl.ID], dl.DeadForSeconds, 120, "dead_for_seconds")
		require.InDelta(t, 400*24*3600, dl.AgeSeconds, 3700, "age_seconds")
	}
}

// TestHostilePendingGaugesIgnoreDeadLetters: an ancient dead letter must
// not make the oldest-pending-age gauge scream; a young pending row is the
// backlog.
func TestHostilePendingGaugesIgnoreDeadLetters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	hostileDead(t, db, "rules.evaluated", "400 days", "399 days")
	hostileDead(t, db, "rules.evaluated", "10 days", "9 days")
	db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at) VALUES ('rules.evaluated', '{}', now() - interval '30 seconds')`)
	m, err := metrics.NewOutbox(prometheus.NewRegistry())
	require.NoError(t, err)
	require.NoError(t, outbox.PendingGauge(ctx, db.Pool, m))
	require.Equal(t, 1.0, testutil.ToFloat64(m.Pending))
	require.InDelta(t, 30, testutil.ToFloat64(m.OldestPendingAge), 5)
	require.Equal(t, 2.0, testutil.ToFloat64(m.DeadLetters))
}

// raceDB opens transactions on pool whose first query mentioning match
// runs hook after it, once.
type raceDB struct {
	pool  *pgxpool.Pool
	match string
	hook  func()
	once  sync.Once
}

func (r *raceDB) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	tx, err := r.pool.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &raceTx{Tx: tx, r: r}, nil
}

// raceTx is a transaction of a raceDB.
type raceTx struct {
	pgx.Tx
	r *raceDB
}

func (t *raceTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	row := t.Tx.QueryRow(ctx, sql, args...)
	if containsFold(sql, t.r.match) {
		return hookedRow{row: row, after: func() { t.r.once.Do(t.r.hook) }}
	}
	return row
}

type hookedRow struct {
	row   pgx.Row
	after func()
}

func (h hookedRow) Scan(dest ...any) error {
	err := h.row.Scan(dest...)
	h.after()
	return err
}

func containsFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestHostileListAfterRetriedMeanwhile: the after row is retried between
// the listing's check and its page query. The documented answer for an after
// that is not a dead letter any more is 404/409; an empty last page (no
// next) silently ends an operator's paging with dead letters unlisted.
func TestHostileListAfterRetriedMeanwhile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	first := hostileDead(t, db, "rules.evaluated", "3 days", "3 hours")
	for range 3 {
		hostileDead(t, db, "rules.evaluated", "3 days", "2 hours")
	}
	rdb := &raceDB{pool: db.Pool, match: "dead_lettered_at IS NOT NULL)::bool AS dead_lettered", hook: func() {
		_, err := outbox.RetryDeadLetter(context.Background(), db.Pool, first, "ops:bob")
		require.NoError(t, err)
	}}
	page, err := outbox.ListDeadLetters(ctx, rdb, first, 2)
	if err == nil {
		require.NotEmpty(t, page.DeadLetters, "after a dead letter retried meanwhile the listing answered an empty last page (total %d): the operator's paging ends with %d dead letters never shown",
			page.Total, page.Total)
	}
}

// TestHostileListPagingIsComplete: dead letters dead-lettered in one drain
// transaction share one dead_lettered_at; paging by one must list each once.
func TestHostileListPagingIsComplete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	var want []uuid.UUID
	for range 7 {
		id := uuid.New()                                                                                  // random, so id order differs from insertion order
		db.Exec(t, "INSERT INTO event_outbox (id, event_type, payload) VALUES ($1, 'bad key', '{}')", id) // invalid routing key: all dead in one drain
		want = append(want, id)
	}
	_, logger := newLogRecorder()
	rep, err := (&outbox.Drainer{Pool: db.Pool, Publisher: &fakePublisher{}, Logger: logger}).DrainOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 7, rep.DeadLettered)
	seen := map[uuid.UUID]int{}
	after := uuid.Nil
	for range 20 {
		page, err := outbox.ListDeadLetters(ctx, db.Pool, after, 2)
		require.NoError(t, err)
		for _, dl := range page.DeadLetters {
			seen[dl.ID]++
			require.Equal(t, 1, dl.Attempts)
			require.Contains(t, dl.LastError, "malformed")
		}
		if page.Next == "" {
			break
		}
		after = uuid.MustParse(page.Next)
	}
	require.Len(t, seen, 7)
	for _, id := range want {
		require.Equal(t, 1, seen[id])
	}
	_, err = outbox.ListDeadLetters(ctx, db.Pool, uuid.Nil, 1001)
	require.ErrorIs(t, err, outbox.ErrBadDeadLetterRequest)
	_, err = outbox.ListDeadLetters(ctx, db.Pool, uuid.Nil, -1)
	require.ErrorIs(t, err, outbox.ErrBadDeadLetterRequest)
}

// TestHostileRetryActorIsChecked: an actor that is not an identity (a
// bearer token, SQL) is refused and nothing changes.
func TestHostileRetryActorIsChecked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	id := hostileDead(t, db, "rules.evaluated", "1 day", "1 hour")
	for _, actor := range []string{"", " ops:alice", "ops:alice\nforged", "ops:\u200balice"} {
		_, err := outbox.RetryDeadLetter(ctx, db.Pool, id, actor)
		require.ErrorIs(t, err, outbox.ErrBadDeadLetterRequest, "%q", actor)
	}
	require.Equal(t, int64(1), db.Count(t, "SELECT count(*) FROM event_outbox WHERE id = $1 AND dead_lettered_at IS NOT NULL AND retried_by IS NULL", id))
	// SQL-ish text is an identity like any other: bound, never interpreted.
	sqlish := "x'; DELETE FROM event_outbox; --"
	_, err := outbox.RetryDeadLetter(ctx, db.Pool, id, sqlish)
	require.NoError(t, err)
	require.Equal(t, int64(1), db.Count(t, "SELECT count(*) FROM event_outbox WHERE id = $1 AND retried_by = $2", id, sqlish))
}

// TestHostileMaxAttemptsLoweredAndZero: lowering max_attempts below a
// row's count dead-letters it at its next refusal (not at once, not
// never); 0 never dead-letters.
func TestHostileMaxAttemptsLoweredAndZero(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	id := stage(t, db, "rules.evaluated")
	db.Exec(t, "UPDATE event_outbox SET attempts = 10, last_error = 'nacked', last_attempt_at = now() - interval '2 hours' WHERE id = $1", id)
	refuse := &fakePublisher{fail: func(context.Context, outbox.Message) error { return errors.New("nacked") }}
	_, logger := newLogRecorder()
	forever := &outbox.Drainer{Pool: db.Pool, Publisher: refuse, Logger: logger, MaxAttempts: 0, RetryBackoff: time.Nanosecond}
	for range 5 {
		_, err := forever.DrainOnce(ctx)
		require.NoError(t, err)
	}
	require.Equal(t, int64(1), db.Count(t, "SELECT count(*) FROM event_outbox WHERE id = $1 AND attempts = 15 AND dead_lettered_at IS NULL", id))
	lowered := &outbox.Drainer{Pool: db.Pool, Publisher: refuse, Logger: logger, MaxAttempts: 3, RetryBackoff: time.Nanosecond}
	rep, err := lowered.DrainOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.DeadLettered)
	require.Equal(t, int64(1), db.Count(t, "SELECT count(*) FROM event_outbox WHERE id = $1 AND attempts = 16 AND dead_lettered_at IS NOT NULL", id))
}
