package prune

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// sessionRestoreTimeout bounds putting a session's settings back after a
// call that was cancelled: long enough for one round trip on a loaded
// server, short enough not to hold up a shutdown.
const sessionRestoreTimeout = 5 * time.Second

// destroyCommitTimeout bounds the COMMIT of a transaction that destroyed
// rows (a batch's DELETE, a drop's), once its statements are done: the
// call's cancel no longer interrupts it, so a cancel arriving while the
// COMMIT is in flight cannot leave rows gone that no report counts. Long
// enough for a drop's commit of several large partitions (91 ms a partition
// of 1,000,000 rows measured), short enough that a server that stops
// answering cannot hold a shutdown for long.
const destroyCommitTimeout = 30 * time.Second

// commitDestroyed commits a transaction whose destroying statements are
// done, whatever happens to the call's context meanwhile (within
// destroyCommitTimeout): the rows it removed are then the call's to report.
func commitDestroyed(ctx context.Context, tx interface{ Commit(context.Context) error }) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), destroyCommitTimeout)
	defer cancel()
	return tx.Commit(cctx)
}

// Statements of the session path (reviewed like queries/: names and values
// are bound parameters, the names are the kernel's own constants).
const (
	readSettings  = `SELECT current_setting(s.name) FROM unnest($1::text[]) WITH ORDINALITY AS s(name, i) ORDER BY s.i`
	applySettings = `SELECT count(set_config(s.name, s.value, false)) FROM unnest($1::text[], $2::text[]) AS s(name, value)`
)

// sessionSettings are the settings a call on a Session makes for its
// duration: asynchronous commits, the policy's non-zero timeouts (in ms) and
// generic plans when the policy asks for them.
func (p Policy) sessionSettings() (names, values []string) {
	names, values = []string{"synchronous_commit"}, []string{"off"}
	for _, st := range []struct {
		name string
		d    time.Duration
	}{{"statement_timeout", p.StatementTimeout}, {"lock_timeout", p.LockTimeout}} {
		if st.d > 0 {
			names, values = append(names, st.name), append(values, serverMillis(st.d))
		}
	}
	if p.GenericPlans {
		names, values = append(names, "plan_cache_mode"), append(values, "force_generic_plan")
	}
	return names, values
}

// setSession makes the call's settings on s and returns the function that
// puts the previous values back (run it on every exit path; it ignores ctx's
// cancellation so that a cancelled sweep does not leave its settings on a
// connection that goes back to a pool).
func (p Policy) setSession(ctx context.Context, s Session) (restore func() error, err error) {
	names, values := p.sessionSettings()
	saved := make([]string, 0, len(names))
	rows, err := s.Query(ctx, readSettings, names)
	if err != nil {
		return nil, fmt.Errorf("read session settings: %w", err)
	}
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read session settings: %w", err)
		}
		saved = append(saved, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read session settings: %w", err)
	}
	if len(saved) != len(names) {
		return nil, fmt.Errorf("read session settings: %d values for %d settings", len(saved), len(names))
	}
	restore = func() error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sessionRestoreTimeout)
		defer cancel()
		if _, err := s.Exec(rctx, applySettings, names, saved); err != nil {
			return fmt.Errorf("restore session settings: %w", err)
		}
		return nil
	}
	if _, err := s.Exec(ctx, applySettings, names, values); err != nil {
		// A failed statement changes nothing; put back anything that did
		// change all the same (a cancelled call may have half-run it).
		_ = restore()
		return nil, fmt.Errorf("set session settings: %w", err)
	}
	return restore, nil
}

// serverMillis is a timeout as PostgreSQL's millisecond settings take it,
// rounded up: a positive duration under a millisecond is 1 ms, never the
// 0 that means no timeout at all.
func serverMillis(d time.Duration) string {
	ms := d.Milliseconds()
	if d > 0 && time.Duration(ms)*time.Millisecond < d {
		ms++
	}
	return strconv.FormatInt(ms, 10)
}
