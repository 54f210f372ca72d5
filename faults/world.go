package faults

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/kernel/subject"
)

// World is one scenario's service: its database, its bucket, and the rows
// it seeded into the archived table, aged (free to move to an archive) and
// hot (inside the hot window: must stay).
type World struct {
	Pool    *pgxpool.Pool
	Store   *store.Store
	Service string
	Table   string
	Specs   []archive.TableSpec
	Aged    map[uuid.UUID]string // id → to_jsonb text
	Hot     map[uuid.UUID]string
	// SubjectKey is the key the archives are indexed with; zero: the
	// subject index is not checked.
	SubjectKey subject.Key
	// Expunged are seeded rows an expungement was ordered for: once it
	// completed they must be in no table and no archive; while it may be
	// interrupted, anywhere or nowhere.
	Expunged map[uuid.UUID]bool
}

// Seed inserts rows with query (one INSERT … RETURNING id, to_jsonb(t)::text
// over n generated rows) and records them as aged or hot.
func (w *World) Seed(ctx context.Context, query string, n int, hot bool) error {
	rows, err := w.Pool.Query(ctx, query, n)
	if err != nil {
		return fmt.Errorf("seed %s: %w", w.Table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id uuid.UUID
		var doc string
		if err := rows.Scan(&id, &doc); err != nil {
			return err
		}
		if hot {
			w.Hot[id] = doc
		} else {
			w.Aged[id] = doc
		}
	}
	return rows.Err()
}

// CheckOptions relax the checker for a state a scenario expects.
type CheckOptions struct {
	// PurgeInterrupted: a purge was killed, so a due, unheld, unpurged
	// archive may have lost one or both objects (the next purge finishes
	// it; the manifest goes first).
	PurgeInterrupted bool
	// ExpungeInterrupted: an expungement was killed, so an archive it
	// stamped superseded may still have its objects (the next call
	// destroys them), and the expunged rows may still be anywhere.
	ExpungeInterrupted bool
}

// Report is one check: how many facts were checked and every violation.
type Report struct {
	Checks     int
	Violations []string
	// Orphans are objects under the service's prefix no ledger row names.
	Orphans []string
	// HalfPurged counts archives a killed purge left unstamped.
	HalfPurged int
}

func (r *Report) fail(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

// Err is the violations as one error (nil when none).
func (r Report) Err() error {
	if len(r.Violations) == 0 {
		return nil
	}
	return errors.New(strings.Join(r.Violations, "\n"))
}

// ledgerRow is what the checker reads of the ledger.
type ledgerRow struct {
	id                   uuid.UUID
	dataKey, manifestKey string
	sha                  string
	count                int
	first, last          uuid.UUID
	purged, due          bool
	superseded           bool
}

// Check runs every invariant of the suite:
//   - every hot row is in its table, unchanged;
//   - every aged row is in its table unchanged, or, verbatim, in the data
//     object of an unpurged ledger row whose sha256 matches the ledger's,
//     or inside the id range of a purged archive — never in two places;
//   - every unpurged ledger row has both objects, its data matching its
//     sha256 and line count (unless a killed purge may have taken them);
//   - no purged archive's object remains;
//   - no advisory lock is held in the database;
//   - the orphans (objects no ledger row names) are listed, and verify
//     reports every one of them.
func (w *World) Check(ctx context.Context, opt CheckOptions) (Report, error) {
	var rep Report
	ledger, err := w.ledger(ctx)
	if err != nil {
		return rep, err
	}
	archived, err := w.checkLedger(ctx, ledger, opt, &rep)
	if err != nil {
		return rep, err
	}
	if err := w.checkRows(ctx, ledger, archived, opt, &rep); err != nil {
		return rep, err
	}
	if err := w.checkLocks(ctx, &rep); err != nil {
		return rep, err
	}
	if err := w.checkSubjects(ctx, ledger, &rep); err != nil {
		return rep, err
	}
	return rep, w.checkOrphans(ctx, ledger, &rep)
}

func (w *World) ledger(ctx context.Context) ([]ledgerRow, error) {
	rows, err := w.Pool.Query(ctx, `SELECT archive_id, data_key, manifest_key, data_sha256, record_count, first_record_id, last_record_id,
		purged_at IS NOT NULL, (retention_until IS NOT NULL AND retention_until <= (now() AT TIME ZONE 'UTC')::date AND NOT legal_hold), expunge_id IS NOT NULL
		FROM archive_ledger ORDER BY archive_id`)
	if err != nil {
		return nil, fmt.Errorf("read the ledger: %w", err)
	}
	defer rows.Close()
	var out []ledgerRow
	for rows.Next() {
		var l ledgerRow
		if err := rows.Scan(&l.id, &l.dataKey, &l.manifestKey, &l.sha, &l.count, &l.first, &l.last, &l.purged, &l.due, &l.superseded); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// checkLedger checks each ledger row's objects and returns the lines of
// every intact archive (id → line).
func (w *World) checkLedger(ctx context.Context, ledger []ledgerRow, opt CheckOptions, rep *Report) (map[uuid.UUID]string, error) {
	lines := map[uuid.UUID]string{}
	for _, l := range ledger {
		mok, err := w.Store.Exists(ctx, l.manifestKey)
		if err != nil {
			return nil, err
		}
		data, derr := w.Store.Get(ctx, l.dataKey)
		if derr != nil && !errors.Is(derr, store.ErrNotFound) {
			return nil, derr
		}
		dok := derr == nil
		rep.Checks++
		switch {
		case l.purged && l.superseded && opt.ExpungeInterrupted:
		case l.purged && (mok || dok):
			rep.fail("archive %s is stamped purged but its objects remain (manifest %v, data %v)", l.id, mok, dok)
		case l.purged:
		case (!mok || !dok) && opt.PurgeInterrupted && l.due:
			rep.HalfPurged++
		case !mok || !dok:
			rep.fail("ledger row %s lacks its objects (manifest %v, data %v)", l.id, mok, dok)
		case archive.SHA256Hex(data) != l.sha:
			rep.fail("archive %s: data sha256 differs from the ledger's", l.id)
		default:
			n, dup, err := collectLines(data, lines)
			if err != nil || n != l.count {
				rep.fail("archive %s: %d lines (%v), the ledger counts %d", l.id, n, err, l.count)
			}
			if dup != uuid.Nil {
				rep.fail("row %s is in two archives (one of them %s)", dup, l.id)
			}
		}
	}
	return lines, nil
}

// collectLines adds an archive's lines to into; dup is a row already there
// (archived twice).
func collectLines(data []byte, into map[uuid.UUID]string) (n int, dup uuid.UUID, err error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, len(data)+1)
	for sc.Scan() {
		var v struct {
			ID uuid.UUID `json:"id"`
		}
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			return n, dup, err
		}
		if _, seen := into[v.ID]; seen {
			dup = v.ID
		}
		into[v.ID] = sc.Text()
		n++
	}
	return n, dup, sc.Err()
}

// checkRows checks every seeded row against the table and the archives.
func (w *World) checkRows(ctx context.Context, ledger []ledgerRow, archived map[uuid.UUID]string, opt CheckOptions, rep *Report) error {
	ids := make([]uuid.UUID, 0, len(w.Aged)+len(w.Hot))
	for id := range w.Aged {
		ids = append(ids, id)
	}
	for id := range w.Hot {
		ids = append(ids, id)
	}
	hot, err := w.tableRows(ctx, ids)
	if err != nil {
		return err
	}
	for id, doc := range w.Hot {
		rep.Checks++
		if w.Expunged[id] {
			w.checkExpunged(id, hot, archived, opt, rep)
			continue
		}
		if got, ok := hot[id]; !ok || got != doc {
			rep.fail("must-keep row %s is gone or changed (present %v)", id, ok)
		}
	}
	for id, doc := range w.Aged {
		rep.Checks++
		if w.Expunged[id] {
			w.checkExpunged(id, hot, archived, opt, rep)
			continue
		}
		inTable, inTableOK := hot[id]
		line, inArchive := archived[id]
		switch {
		case inTableOK && inArchive:
			rep.fail("row %s is both in %s and in an archive", id, w.Table)
		case inTableOK && inTable != doc:
			rep.fail("row %s changed in %s", id, w.Table)
		case inTableOK:
		case inArchive && line != doc:
			rep.fail("row %s differs in its archive", id)
		case inArchive:
		case inPurged(ledger, id):
		default:
			rep.fail("row %s is lost: in neither %s nor any archive", id, w.Table)
		}
	}
	return nil
}

// tableRows reads the rows of ids still in the world's table (id →
// to_jsonb text).
func (w *World) tableRows(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]string, error) {
	hot := map[uuid.UUID]string{}
	rows, err := w.Pool.Query(ctx, `SELECT t.id, to_jsonb(t)::text FROM `+w.Table+` AS t WHERE t.id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", w.Table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id uuid.UUID
		var doc string
		if err := rows.Scan(&id, &doc); err != nil {
			return nil, err
		}
		hot[id] = doc
	}
	return hot, rows.Err()
}

// checkExpunged: a row whose expungement completed is in no table and no
// intact archive (while one may be interrupted it may be anywhere).
func (w *World) checkExpunged(id uuid.UUID, hot, archived map[uuid.UUID]string, opt CheckOptions, rep *Report) {
	if opt.ExpungeInterrupted {
		return
	}
	_, inTable := hot[id]
	_, inArchive := archived[id]
	if inTable || inArchive {
		rep.fail("expunged row %s is still there (table %v, archive %v)", id, inTable, inArchive)
	}
}

func inPurged(ledger []ledgerRow, id uuid.UUID) bool {
	for _, l := range ledger {
		if (l.purged || l.due) && bytes.Compare(l.first[:], id[:]) <= 0 && bytes.Compare(id[:], l.last[:]) <= 0 {
			return true
		}
	}
	return false
}

// LockGrace is how long the checker lets the server end the session of a
// process that was just killed (its backend notices the closed socket and
// exits, releasing the session's advisory locks, asynchronously).
const LockGrace = 5 * time.Second

// checkLocks: no advisory lock is held in the world's database (once the
// server has ended the sessions of killed processes, within LockGrace).
func (w *World) checkLocks(ctx context.Context, rep *Report) error {
	deadline := time.Now().Add(LockGrace)
	for {
		var n int
		if err := w.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n); err != nil {
			return fmt.Errorf("read pg_locks: %w", err)
		}
		if n == 0 {
			rep.Checks++
			return nil
		}
		if time.Now().After(deadline) {
			rep.Checks++
			rep.fail("%d advisory lock(s) still held %v after the last process ended", n, LockGrace)
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkOrphans lists the objects no ledger row names (every key with a
// version, behind a delete marker too) and checks verify reports each.
func (w *World) checkOrphans(ctx context.Context, ledger []ledgerRow, rep *Report) error {
	objs, err := w.Store.ListAllObjects(ctx, store.Prefix+w.Service+"/") // behind delete markers too
	if err != nil {
		return err
	}
	named := map[string]bool{}
	for _, l := range ledger {
		named[l.dataKey], named[l.manifestKey] = true, true
	}
	for _, o := range objs {
		if (strings.HasSuffix(o.Key, ".ndjson") || strings.HasSuffix(o.Key, ".manifest.json")) && !named[o.Key] {
			rep.Orphans = append(rep.Orphans, o.Key)
		}
	}
	vctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	vr, err := archiveread.New(w.Pool, w.Store, w.Service, w.Specs).Verify(vctx, false, 0)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	rep.Checks++
	for _, o := range rep.Orphans {
		if !slices.Contains(vr.Orphans, o) {
			rep.fail("orphan %s is not reported by verify", o)
		}
	}
	if vr.OrphanCount != len(rep.Orphans) {
		rep.fail("verify counts %d orphans, the listing %d", vr.OrphanCount, len(rep.Orphans))
	}
	return nil
}

// checkSubjects: every intact unpurged archive is indexed, by exactly the
// keyed hashes of its lines' subjects (no archive without its index, no
// index without its archive: a crash at any step leaves both or neither).
func (w *World) checkSubjects(ctx context.Context, ledger []ledgerRow, rep *Report) error {
	if !w.SubjectKey.Valid() {
		return nil
	}
	var spec archive.TableSpec
	for _, s := range w.Specs {
		if s.Table == w.Table {
			spec = s
		}
	}
	if len(spec.Subjects) == 0 {
		return nil
	}
	for _, l := range ledger {
		if l.purged {
			continue
		}
		data, err := w.Store.Get(ctx, l.dataKey)
		if err != nil || archive.SHA256Hex(data) != l.sha {
			continue // reported by checkLedger
		}
		docs := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
		want, err := archive.Hashes(ctx, w.Pool, w.SubjectKey, w.Table, archive.DocSubjectsSQL(spec), docs)
		if err != nil {
			return err
		}
		var indexed bool
		var got [][]byte
		if err := w.Pool.QueryRow(ctx, `SELECT subjects_indexed, COALESCE((SELECT subject_hashes FROM archive_subjects WHERE archive_id = $1), '{}')
			FROM archive_ledger WHERE archive_id = $1`, l.id).Scan(&indexed, &got); err != nil {
			return err
		}
		rep.Checks++
		if !indexed || !sameHashes(want, got) {
			rep.fail("archive %s: subject index (indexed %v, %d hashes) is not its lines' subjects (%d)", l.id, indexed, len(got), len(want))
		}
	}
	return nil
}

func sameHashes(a, b [][]byte) bool {
	set := func(hs [][]byte) map[string]bool {
		m := map[string]bool{}
		for _, h := range hs {
			m[string(h)] = true
		}
		return m
	}
	return maps.Equal(set(a), set(b))
}
