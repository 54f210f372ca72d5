//go:build scratch

package rules_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/services/rules"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// productionSpec is the rules service's own rule_evaluations spec.
func productionSpec(t testing.TB) archive.TableSpec {
	t.Helper()
	specs := rules.ArchiveTables()
	require.Len(t, specs, 1)
	return specs[0]
}

// eventFields is the pinned field list of rules.evaluations_archived (B3; the
// security service validates every one of them, D16).
var eventFields = []string{
	"source_service", "archive_id", "table", "data_key", "manifest_key", "data_sha256", "record_count",
	"store_endpoint", "store_bucket", "first_record_id", "last_record_id", "first_record_at",
	"last_record_at", "hot_window_days", "archived_at", "archived_by",
}

// TestArchiveRoundTrip (matrix row 10): aged evaluations go to the real
// store byte for byte, with a manifest that verifies, ONE ledger row and ONE
// staged event; fresh rows stay.
func TestArchiveRoundTrip(t *testing.T) {
	t.Parallel()
	ctx, env := newRulesEnv(t)
	const n = 120
	aged := seedEvaluations(t, env.db, 1, n+1, 100, 0)
	// Either side of the 90-day boundary, by an hour.
	env.db.Exec(t, `INSERT INTO rule_evaluations (id, evaluated_at, rule_id, input, output) VALUES
		($1, now() - interval '90 days' - interval '1 hour', 'edge', '{"side": "aged"}', '{"v": 1.10}'),
		($2, now() - interval '90 days' + interval '1 hour', 'edge', '{"side": "fresh"}', '{"v": 1.10}')`,
		evalID(5000), evalID(5001))
	aged = append(aged, evalID(5000))
	fresh := append(seedEvaluations(t, env.db, 1000, 1010, 10, 0), evalID(5001))
	env.db.Exec(t, `INSERT INTO rule_evaluations (rule_id, input, output) VALUES ('now', '{}', '{}')`) // the column defaults
	wantDocs := docs(t, env.db, agedWhere)
	require.Len(t, wantDocs, len(aged))
	freshDocs := docs(t, env.db, "NOT ("+agedWhere+")")
	require.Len(t, freshDocs, len(fresh)+1)
	var minID, maxID uuid.UUID
	var minAt, maxAt time.Time
	require.NoError(t, env.db.Pool.QueryRow(ctx, `
		SELECT (SELECT id FROM rule_evaluations e WHERE `+agedWhere+` ORDER BY id LIMIT 1),
		       (SELECT id FROM rule_evaluations e WHERE `+agedWhere+` ORDER BY id DESC LIMIT 1),
		       min(evaluated_at), max(evaluated_at)
		FROM rule_evaluations e WHERE `+agedWhere).Scan(&minID, &maxID, &minAt, &maxAt))

	eng := env.engine(t, []archive.TableSpec{productionSpec(t)}, rules.Bookkeep, nil)
	rep, err := eng.RunPass(ctx, archive.DefaultManualBudget)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	require.False(t, rep.More)
	require.Len(t, rep.Tables, 1)
	tr := rep.Tables[0]
	require.Equal(t, rules.EvaluationsTable, tr.Table)
	require.Equal(t, int64(len(aged)), tr.Archived)
	require.Zero(t, tr.Quarantined)
	require.Nil(t, tr.Error)
	require.Len(t, tr.Archives, 1)
	ref := tr.Archives[0]
	require.Equal(t, len(aged), ref.RecordCount)

	// Objects: the manifest parses and verifies; every line is exactly the
	// row's to_jsonb text captured before the pass, oldest first.
	m, _, lines := readArchive(ctx, t, env.st, ref.DataKey, ref.ManifestKey)
	require.Equal(t, len(aged), m.RecordCount)
	got := map[uuid.UUID]string{}
	for _, l := range lines {
		require.NotContains(t, got, l.id, "a row is archived once")
		got[l.id] = l.text
	}
	require.Equal(t, wantDocs, got)
	require.Contains(t, lines[0].text, `"big": 12345678901234567890.123456789`)
	require.Contains(t, lines[0].text, `"tiny": 0.1000000000000000055511151231257827`)
	require.Contains(t, lines[0].text, `"amount": 1.10`)
	// Range: MIN/MAX, not the first and last lines (ids run against age).
	require.Equal(t, minID, m.FirstRecordID)
	require.Equal(t, maxID, m.LastRecordID)
	require.NotEqual(t, lines[0].id, m.FirstRecordID, "the oldest row does not have the smallest id here")
	require.True(t, minAt.Equal(m.FirstRecordAt), "%v vs %v", minAt, m.FirstRecordAt)
	require.True(t, maxAt.Equal(m.LastRecordAt), "%v vs %v", maxAt, m.LastRecordAt)
	require.Equal(t, env.s3.Service, m.Service)
	require.Equal(t, rules.EvaluationsTable, m.Table)
	require.Equal(t, archive.Format, m.Format)
	require.Equal(t, 90, m.HotWindowDays)
	require.Equal(t, archive.SystemActor, m.ArchivedBy)
	cols, err := archive.TableColumns(ctx, env.db.Pool, rules.EvaluationsTable)
	require.NoError(t, err)
	require.Equal(t, cols, m.Columns)
	require.Equal(t, archive.Fingerprint(cols), m.Fingerprint)
	require.Equal(t, []string{"id", "evaluated_at", "rule_id", "input", "output"}, func() []string {
		var names []string
		for _, c := range m.Columns {
			names = append(names, c.Name)
		}
		return names
	}())

	// Rows: aged gone, fresh (and the boundary row) kept unchanged.
	require.Empty(t, docs(t, env.db, agedWhere))
	require.Equal(t, freshDocs, docs(t, env.db, "true"))

	// ONE ledger row, carrying the manifest's facts.
	ident := env.st.Identity()
	require.NotEmpty(t, ident.Endpoint)
	require.NotEmpty(t, ident.Bucket)
	rows := ledger(t, env.db)
	require.Len(t, rows, 1)
	l := rows[0]
	require.Equal(t, ledgerRow{
		ArchiveID: m.ArchiveID, TableName: rules.EvaluationsTable, DataKey: m.DataKey, ManifestKey: m.ManifestKey,
		DataSHA256: m.DataSHA256, RecordCount: int32(len(aged)), StoreEndpoint: ident.Endpoint, StoreBucket: ident.Bucket,
		FirstRecordID: minID, LastRecordID: maxID, FirstRecordAt: l.FirstRecordAt, LastRecordAt: l.LastRecordAt,
		HotWindowDays: 90, ArchivedAt: l.ArchivedAt, ArchivedBy: archive.SystemActor,
	}, l)
	require.True(t, l.FirstRecordAt.Equal(m.FirstRecordAt))
	require.True(t, l.LastRecordAt.Equal(m.LastRecordAt))
	require.True(t, l.ArchivedAt.Equal(m.ArchivedAt.Truncate(time.Microsecond)))

	// ONE staged event with the ledger's facts and the pinned field list.
	events := outboxEvents(t, env.db)
	require.Len(t, events, 1)
	ev := events[0]
	require.Equal(t, rules.EvaluationsArchivedEvent, ev.EventType)
	require.True(t, ev.Pending, "staged, not yet published")
	require.ElementsMatch(t, eventFields, slices.Collect(func(yield func(string) bool) {
		for k := range ev.Payload {
			if !yield(k) {
				return
			}
		}
	}))
	p := ev.Payload
	require.Equal(t, rules.SourceService, p["source_service"])
	require.Equal(t, "craig-rules", p["source_service"])
	require.Equal(t, l.ArchiveID.String(), p["archive_id"])
	require.Equal(t, l.TableName, p["table"])
	require.Equal(t, l.DataKey, p["data_key"])
	require.Equal(t, l.ManifestKey, p["manifest_key"])
	require.Equal(t, l.DataSHA256, p["data_sha256"])
	require.Equal(t, json.Number(fmt.Sprint(len(aged))), p["record_count"])
	require.Equal(t, l.StoreEndpoint, p["store_endpoint"])
	require.Equal(t, l.StoreBucket, p["store_bucket"])
	require.Equal(t, l.FirstRecordID.String(), p["first_record_id"])
	require.Equal(t, l.LastRecordID.String(), p["last_record_id"])
	require.Equal(t, json.Number("90"), p["hot_window_days"])
	require.Equal(t, archive.SystemActor, p["archived_by"])
	for field, want := range map[string]time.Time{"first_record_at": l.FirstRecordAt, "last_record_at": l.LastRecordAt, "archived_at": l.ArchivedAt} {
		at, err := time.Parse(time.RFC3339Nano, p[field].(string))
		require.NoError(t, err, field)
		require.True(t, want.Equal(at), "%s: %v vs ledger %v", field, at, want)
	}

	require.Equal(t, float64(len(aged)), testutil.ToFloat64(env.m.RowsArchived.WithLabelValues(rules.EvaluationsTable)))
	require.ElementsMatch(t, []string{m.DataKey, m.ManifestKey}, env.s3.Keys(t))
}

// TestArchiveObjectsCannotBeOverwritten: PutCreate on an archive's keys, as
// a retry or a confused writer would, is refused with ErrAlreadyExists and
// the original bytes stay.
func TestArchiveObjectsCannotBeOverwritten(t *testing.T) {
	t.Parallel()
	ctx, env := newRulesEnv(t)
	seedEvaluations(t, env.db, 1, 11, 100, 0)
	rep, err := env.engine(t, []archive.TableSpec{productionSpec(t)}, rules.Bookkeep, nil).RunPass(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	ref := rep.Tables[0].Archives[0]
	origData, err := env.st.Get(ctx, ref.DataKey)
	require.NoError(t, err)
	origManifest, err := env.st.Get(ctx, ref.ManifestKey)
	require.NoError(t, err)

	for key, orig := range map[string][]byte{ref.DataKey: origData, ref.ManifestKey: origManifest} {
		for _, tamper := range [][]byte{[]byte("tampered\n"), {}, append(slices.Clone(orig), '\n')} {
			err := env.st.PutCreate(ctx, key, tamper, store.ContentTypeNDJSON)
			require.ErrorIs(t, err, store.ErrAlreadyExists, key)
		}
		got, err := env.st.Get(ctx, key)
		require.NoError(t, err)
		require.Equal(t, orig, got, "%s is untouched", key)
	}
	require.Equal(t, ledger(t, env.db)[0].DataSHA256, archive.SHA256Hex(origData))
}

// TestArchiveBatching: more rows than a batch take several archives; more is
// true while the budget runs out with rows left (or a full last selection)
// and false once a selection comes back short.
func TestArchiveBatching(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                 string
		rows, batch, budget  int
		firstArchived        int
		firstArchives        int
		firstMore            bool
		secondArchived       int
		secondMore           bool
		wantLedgerRows       int
		wantArchivesPerBatch []int
	}{
		{name: "budget runs out with rows left", rows: 25, batch: 10, budget: 2,
			firstArchived: 20, firstArchives: 2, firstMore: true, secondArchived: 5, secondMore: false,
			wantLedgerRows: 3, wantArchivesPerBatch: []int{10, 10, 5}},
		{name: "budget ends on a full last selection", rows: 20, batch: 10, budget: 2,
			firstArchived: 20, firstArchives: 2, firstMore: true, secondArchived: 0, secondMore: false,
			wantLedgerRows: 2, wantArchivesPerBatch: []int{10, 10}},
		{name: "a spare batch proves the drain", rows: 20, batch: 10, budget: 3,
			firstArchived: 20, firstArchives: 2, firstMore: false, secondArchived: 0, secondMore: false,
			wantLedgerRows: 2, wantArchivesPerBatch: []int{10, 10}},
		{name: "one short batch", rows: 5, batch: 10, budget: 1,
			firstArchived: 5, firstArchives: 1, firstMore: false, secondArchived: 0, secondMore: false,
			wantLedgerRows: 1, wantArchivesPerBatch: []int{5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, env := newRulesEnv(t)
			aged := seedEvaluations(t, env.db, 1, tt.rows+1, 100, 0)
			fresh := seedEvaluations(t, env.db, 1000, 1003, 1, 0)
			eng := env.engine(t, []archive.TableSpec{productionSpec(t)}, rules.Bookkeep, func(c *archive.Config) { c.BatchSize = tt.batch })

			rep, err := eng.RunPass(ctx, tt.budget)
			require.NoError(t, err)
			require.NoError(t, rep.Err())
			require.Equal(t, int64(tt.firstArchived), rep.Tables[0].Archived)
			require.Len(t, rep.Tables[0].Archives, tt.firstArchives)
			require.Equal(t, tt.firstMore, rep.More)
			lines := archivedLines(ctx, t, env.st, rep.Tables[0])

			rep, err = eng.RunPass(ctx, 100)
			require.NoError(t, err)
			require.NoError(t, rep.Err())
			require.Equal(t, int64(tt.secondArchived), rep.Tables[0].Archived)
			require.Equal(t, tt.secondMore, rep.More)
			lines = append(lines, archivedLines(ctx, t, env.st, rep.Tables[0])...)

			var archived []uuid.UUID
			for _, l := range lines {
				archived = append(archived, l.id)
			}
			require.ElementsMatch(t, aged, archived, "every aged row archived exactly once")
			var counts []int
			for _, r := range ledger(t, env.db) {
				counts = append(counts, int(r.RecordCount))
			}
			require.Len(t, counts, tt.wantLedgerRows)
			require.Equal(t, tt.wantArchivesPerBatch, counts)
			require.Len(t, outboxEvents(t, env.db), tt.wantLedgerRows)
			require.Equal(t, idSet(fresh), idSet(func() []uuid.UUID {
				var ids []uuid.UUID
				for id := range docs(t, env.db, "true") {
					ids = append(ids, id)
				}
				return ids
			}()))
		})
	}
}

// TestArchiveByteCapTruncates (matrix row 9): a batch whose NDJSON would pass
// max_batch_bytes is cut at the last row that fits and reports more; the
// next batches take the rest, every object within the cap.
func TestArchiveByteCapTruncates(t *testing.T) {
	t.Parallel()
	ctx, env := newRulesEnv(t)
	const maxBytes = 4096
	aged := seedEvaluations(t, env.db, 1, 21, 100, 700) // ~1 KiB lines: ~4 per object
	eng := env.engine(t, []archive.TableSpec{productionSpec(t)}, rules.Bookkeep, func(c *archive.Config) { c.MaxBatchBytes = maxBytes })

	rep, err := eng.RunPass(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	require.True(t, rep.More, "byte-truncated: more")
	tr := rep.Tables[0]
	require.Len(t, tr.Archives, 1)
	k := tr.Archives[0].RecordCount
	require.Greater(t, k, 1)
	require.Less(t, k, len(aged))
	_, data, lines := readArchive(ctx, t, env.st, tr.Archives[0].DataKey, tr.Archives[0].ManifestKey)
	require.LessOrEqual(t, len(data), maxBytes)
	// The cut is exact: the next row in age order would not have fit.
	var nextLen int
	require.NoError(t, env.db.Pool.QueryRow(ctx, `SELECT octet_length(to_jsonb(e)::text) + 1 FROM rule_evaluations e ORDER BY evaluated_at, id LIMIT 1`).Scan(&nextLen))
	require.Greater(t, len(data)+nextLen, maxBytes)
	require.Zero(t, tr.Quarantined)

	rep, err = eng.RunPass(ctx, 100)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	require.False(t, rep.More)
	for _, ref := range rep.Tables[0].Archives {
		data, err := env.st.Get(ctx, ref.DataKey)
		require.NoError(t, err)
		require.LessOrEqual(t, len(data), maxBytes)
	}
	lines = append(lines, archivedLines(ctx, t, env.st, rep.Tables[0])...)
	var archived []uuid.UUID
	for _, l := range lines {
		archived = append(archived, l.id)
	}
	require.ElementsMatch(t, aged, archived)
	require.Zero(t, env.db.Count(t, `SELECT count(*) FROM rule_evaluations`))
}

// auditItemsSpec is a second archived table for the two-table engine tests.
const auditItemsDDL = `
CREATE TABLE audit_items (
    id         uuid        PRIMARY KEY DEFAULT uuid_generate_v7(),
    created_at timestamptz NOT NULL,
    note       text        NOT NULL
)`

func auditItemsSpec(failSelect bool) archive.TableSpec {
	return archive.TableSpec{
		Table:     "audit_items",
		AgeColumn: "created_at",
		Select: func(ctx context.Context, db prune.DB, p archive.SelectParams) ([]archive.Row, error) {
			if failSelect {
				return nil, errors.New("injected: audit_items selection fails")
			}
			rows, err := db.Query(ctx, `SELECT t.id, t.created_at, to_jsonb(t)::text FROM audit_items AS t
				WHERE t.created_at < now() - make_interval(days => $1::int) AND (t.created_at, t.id) > ($2::timestamptz, $3::uuid)
				ORDER BY t.created_at, t.id LIMIT $4::int`, p.HotWindowDays, p.After.At, p.After.ID, p.Limit)
			if err != nil {
				return nil, err
			}
			return pgx.CollectRows(rows, func(r pgx.CollectableRow) (archive.Row, error) {
				var row archive.Row
				return row, r.Scan(&row.ID, &row.At, &row.Doc)
			})
		},
		Delete: func(ctx context.Context, tx pgx.Tx, hot int32, ids []uuid.UUID) (int64, error) {
			tag, err := tx.Exec(ctx, `DELETE FROM audit_items WHERE id = ANY ($1::uuid[]) AND created_at < now() - make_interval(days => $2::int)`, ids, hot)
			return tag.RowsAffected(), err
		},
	}
}

// TestArchiveQuarantineAndTableIsolation (D13): a single evaluation larger
// than max_batch_bytes is quarantined (counted, metered, WARNed) while the
// pass archives the others, and a second table is unaffected; a failing
// second table does not stop rule_evaluations either.
func TestArchiveQuarantineAndTableIsolation(t *testing.T) {
	t.Parallel()
	const maxBytes = 8192
	tests := []struct {
		name             string
		oversize         bool
		failAudit        bool
		wantQuarantined  int
		wantRulesArchive int64
		wantAuditArchive int64
		wantAuditErr     error
	}{
		{name: "oversize evaluation quarantined", oversize: true, wantQuarantined: 1, wantRulesArchive: 10, wantAuditArchive: 6},
		{name: "failing second table isolated", failAudit: true, wantRulesArchive: 10, wantAuditErr: archive.ErrDB},
		{name: "both", oversize: true, failAudit: true, wantQuarantined: 1, wantRulesArchive: 10, wantAuditErr: archive.ErrDB},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, env := newRulesEnv(t)
			env.db.Exec(t, auditItemsDDL)
			env.db.Exec(t, `INSERT INTO audit_items (created_at, note) SELECT now() - interval '100 days' - make_interval(mins => g), 'n' || g FROM generate_series(1, 6) g`)
			normal := append(seedEvaluations(t, env.db, 1, 6, 100, 0), seedEvaluations(t, env.db, 7, 12, 100, 0)...)
			var big uuid.UUID
			if tt.oversize {
				big = seedEvaluations(t, env.db, 6, 7, 100, maxBytes)[0] // between the others in age
			}
			eng := env.engine(t, []archive.TableSpec{productionSpec(t), auditItemsSpec(tt.failAudit)}, rules.Bookkeep,
				func(c *archive.Config) { c.MaxBatchBytes = maxBytes; c.BatchSize = 4 })

			rep, err := eng.RunPass(ctx, 50)
			require.NoError(t, err)
			require.False(t, rep.More)
			rt, at := rep.Tables[0], rep.Tables[1]
			require.NoError(t, rt.Err, "rule_evaluations archives despite the other table and the poison row")
			require.Equal(t, tt.wantQuarantined, rt.Quarantined)
			require.Equal(t, tt.wantRulesArchive, rt.Archived)
			require.Equal(t, float64(tt.wantQuarantined), testutil.ToFloat64(env.m.Quarantined.WithLabelValues(rules.EvaluationsTable)))
			require.Zero(t, testutil.ToFloat64(env.m.Quarantined.WithLabelValues("audit_items")))
			var archived []uuid.UUID
			for _, l := range archivedLines(ctx, t, env.st, rt) {
				archived = append(archived, l.id)
			}
			require.ElementsMatch(t, normal, archived)

			require.Zero(t, at.Quarantined)
			require.Equal(t, tt.wantAuditArchive, at.Archived)
			if tt.wantAuditErr != nil {
				require.ErrorIs(t, at.Err, tt.wantAuditErr)
				require.NotNil(t, at.Error)
				require.Equal(t, int64(6), env.db.Count(t, `SELECT count(*) FROM audit_items`))
				require.ErrorIs(t, rep.Err(), tt.wantAuditErr)
			} else {
				require.NoError(t, at.Err)
				require.Nil(t, at.Error)
				require.Zero(t, env.db.Count(t, `SELECT count(*) FROM audit_items`))
				require.Equal(t, int64(6), env.db.Count(t, `SELECT sum(record_count) FROM archive_ledger WHERE table_name = 'audit_items'`))
			}

			warns := env.logs.Entries(slog.LevelWarn, "quarantined")
			if !tt.oversize {
				require.Empty(t, warns)
				require.Zero(t, env.db.Count(t, `SELECT count(*) FROM rule_evaluations`))
				return
			}
			require.Len(t, warns, 1)
			require.Equal(t, rules.EvaluationsTable, warns[0]["table"])
			require.Equal(t, big.String(), warns[0]["id"])
			require.Greater(t, warns[0]["row_bytes"].(int64), int64(maxBytes))
			require.Equal(t, int64(maxBytes), warns[0]["max_batch_bytes"])
			require.Equal(t, int64(1), env.db.Count(t, `SELECT count(*) FROM rule_evaluations`))
			require.Equal(t, int64(1), env.db.Count(t, `SELECT count(*) FROM rule_evaluations WHERE id = $1`, big), "the poison row stays, for an operator")

			// The next pass quarantines it again and archives nothing else.
			rep, err = eng.RunPass(ctx, 50)
			require.NoError(t, err)
			require.Equal(t, 1, rep.Tables[0].Quarantined)
			require.Zero(t, rep.Tables[0].Archived)
			require.False(t, rep.More)
		})
	}
}

// faultyDelete wraps the production delete: armed, it deletes one row fewer
// than it was given (a count mismatch) or fails outright.
func faultyDelete(inner archive.DeleteFunc, armed *atomic.Bool, fail bool) archive.DeleteFunc {
	return func(ctx context.Context, tx pgx.Tx, hot int32, ids []uuid.UUID) (int64, error) {
		if !armed.CompareAndSwap(true, false) {
			return inner(ctx, tx, hot, ids)
		}
		if fail {
			return 0, errors.New("injected: delete failed")
		}
		return inner(ctx, tx, hot, ids[1:])
	}
}

// TestArchiveCrashResume (matrix row 11): the puts succeed, then the prune
// transaction aborts (fault injection). Nothing is deleted, no ledger row or
// event exists; the next pass re-archives the same rows under a NEW archive
// id and prunes, and the first pass's objects are the only residue.
func TestArchiveCrashResume(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		fault    string // bookkeep | mismatch | delete
		wantKind error
	}{
		{"bookkeeping fails after the puts", "bookkeep", archive.ErrBookkeep},
		{"delete removes fewer rows than archived", "mismatch", archive.ErrDB},
		{"delete fails", "delete", archive.ErrDB},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, env := newRulesEnv(t)
			aged := seedEvaluations(t, env.db, 1, 31, 100, 0)
			before := docs(t, env.db, "true")
			var armed atomic.Bool
			armed.Store(true)
			spec := productionSpec(t)
			bk := archive.BookkeepFunc(rules.Bookkeep)
			switch tt.fault {
			case "bookkeep":
				bk = func(ctx context.Context, tx pgx.Tx, m archive.Manifest, by string) error {
					if armed.CompareAndSwap(true, false) {
						// The production bookkeeping ran, then the process "crashed".
						if err := rules.Bookkeep(ctx, tx, m, by); err != nil {
							return err
						}
						return errors.New("injected: crash after the ledger insert")
					}
					return rules.Bookkeep(ctx, tx, m, by)
				}
			case "mismatch", "delete":
				spec.Delete = faultyDelete(spec.Delete, &armed, tt.fault == "delete")
			}
			eng := env.engine(t, []archive.TableSpec{spec}, bk, nil)

			rep, err := eng.RunPass(ctx, 5)
			require.NoError(t, err)
			tr := rep.Tables[0]
			require.ErrorIs(t, tr.Err, tt.wantKind)
			if tt.fault == "mismatch" {
				require.ErrorContains(t, tr.Err, "delete removed 29 rows of the 30 archived")
			}
			require.False(t, rep.More, "an error-stopped table reports no more")
			require.Zero(t, tr.Archived)
			require.Empty(t, tr.Archives)
			require.Equal(t, before, docs(t, env.db, "true"), "every row intact, the count-mismatch victim included")
			require.Empty(t, ledger(t, env.db))
			require.Empty(t, outboxEvents(t, env.db))
			orphans := env.s3.Keys(t)
			require.Len(t, orphans, 2, "the aborted pass left its data and manifest")
			orphanManifest, orphanData, _ := readArchive(ctx, t, env.st, orphans[1], orphans[0]) // sorted: .manifest.json < .ndjson

			rep, err = eng.RunPass(ctx, 5)
			require.NoError(t, err)
			require.NoError(t, rep.Err())
			tr = rep.Tables[0]
			require.Equal(t, int64(len(aged)), tr.Archived)
			require.Len(t, tr.Archives, 1)
			require.NotEqual(t, orphanManifest.ArchiveID, tr.Archives[0].ArchiveID, "re-archived under a NEW archive id")
			m, data, _ := readArchive(ctx, t, env.st, tr.Archives[0].DataKey, tr.Archives[0].ManifestKey)
			require.Equal(t, orphanData, data, "the same rows, byte for byte")
			require.Equal(t, orphanManifest.DataSHA256, m.DataSHA256)
			require.Zero(t, env.db.Count(t, `SELECT count(*) FROM rule_evaluations`))
			rows := ledger(t, env.db)
			require.Len(t, rows, 1)
			require.Equal(t, m.ArchiveID, rows[0].ArchiveID)
			require.Len(t, outboxEvents(t, env.db), 1)
			require.ElementsMatch(t, append(orphans, m.DataKey, m.ManifestKey), env.s3.Keys(t),
				"the first pass's two objects are the only residue")
			require.Zero(t, env.db.Count(t, `SELECT count(*) FROM archive_ledger WHERE archive_id = $1`, orphanManifest.ArchiveID),
				"no ledger row names the orphans (orphan GC is local-ledger-only)")
		})
	}
}

// TestArchiveAtomicityOutboxGone: with event_outbox renamed away, staging
// fails INSIDE the prune transaction after the ledger insert, so everything
// rolls back: no ledger row without its event, no deleted row.
func TestArchiveAtomicityOutboxGone(t *testing.T) {
	t.Parallel()
	ctx, env := newRulesEnv(t)
	seedEvaluations(t, env.db, 1, 16, 100, 0)
	before := docs(t, env.db, "true")
	env.db.Exec(t, `ALTER TABLE event_outbox RENAME TO event_outbox_gone`)
	eng := env.engine(t, []archive.TableSpec{productionSpec(t)}, rules.Bookkeep, nil)

	rep, err := eng.RunPass(ctx, 5)
	require.NoError(t, err)
	tr := rep.Tables[0]
	require.ErrorIs(t, tr.Err, archive.ErrBookkeep)
	require.ErrorContains(t, tr.Err, "stage "+rules.EvaluationsArchivedEvent)
	require.ErrorContains(t, tr.Err, "event_outbox")
	require.Zero(t, tr.Archived)
	require.Empty(t, ledger(t, env.db), "the ledger insert rolled back with the failed staging")
	require.Equal(t, before, docs(t, env.db, "true"), "no row deleted")
	require.Zero(t, env.db.Count(t, `SELECT count(*) FROM event_outbox_gone`))
	require.Equal(t, 1.0, testutil.ToFloat64(env.m.Failures.WithLabelValues(rules.EvaluationsTable, "bookkeep")))

	env.db.Exec(t, `ALTER TABLE event_outbox_gone RENAME TO event_outbox`)
	rep, err = eng.RunPass(ctx, 5)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	require.Equal(t, int64(15), rep.Tables[0].Archived)
	require.Len(t, ledger(t, env.db), 1)
	require.Len(t, outboxEvents(t, env.db), 1)
	require.Zero(t, env.db.Count(t, `SELECT count(*) FROM rule_evaluations`))
}

// TestArchiveConcurrentPassesOneRuns (matrix row 12): while one pass holds
// the archive lease, a second gets ErrAlreadyRunning and touches nothing;
// the lease is free again once the first ends.
func TestArchiveConcurrentPassesOneRuns(t *testing.T) {
	t.Parallel()
	ctx, env := newRulesEnv(t)
	seedEvaluations(t, env.db, 1, 21, 100, 0)
	spec := productionSpec(t)
	inner := spec.Select
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	spec.Select = func(ctx context.Context, db prune.DB, p archive.SelectParams) ([]archive.Row, error) {
		first := false
		once.Do(func() { first = true })
		if first {
			close(entered)
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return inner(ctx, db, p)
	}
	eng := env.engine(t, []archive.TableSpec{spec}, rules.Bookkeep, nil)

	type result struct {
		rep archive.PassReport
		err error
	}
	firstDone := make(chan result, 1)
	go func() {
		rep, err := eng.RunPass(ctx, 5)
		firstDone <- result{rep, err}
	}()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the first pass never selected")
	}

	rep, err := eng.RunPass(ctx, 5)
	require.ErrorIs(t, err, archive.ErrAlreadyRunning)
	var ae *archive.Error
	require.ErrorAs(t, err, &ae)
	require.Equal(t, archive.ErrAlreadyRunning, ae.Kind)
	require.Zero(t, rep.Tables[0].Archived)
	require.False(t, rep.More)
	// A second engine (another replica) is fenced too.
	_, err = env.engine(t, []archive.TableSpec{productionSpec(t)}, rules.Bookkeep, nil).RunPass(ctx, 5)
	require.ErrorIs(t, err, archive.ErrAlreadyRunning)
	require.Equal(t, int64(20), env.db.Count(t, `SELECT count(*) FROM rule_evaluations`))
	require.Empty(t, ledger(t, env.db))

	close(release)
	first := <-firstDone
	require.NoError(t, first.err)
	require.NoError(t, first.rep.Err())
	require.Equal(t, int64(20), first.rep.Tables[0].Archived)

	rep, err = eng.RunPass(ctx, 5)
	require.NoError(t, err, "the lease is released when a pass ends")
	require.Zero(t, rep.Tables[0].Archived)
	require.Len(t, ledger(t, env.db), 1)
}

// TestArchiveConcurrentWritersLoseNothing: evaluations inserted while a pass
// runs (aged ones behind and ahead of the cursor, and fresh ones; between
// each batch's SELECT and DELETE and continuously from another goroutine)
// are never lost: each is in the table or in an archived object, not both.
func TestArchiveConcurrentWritersLoseNothing(t *testing.T) {
	t.Parallel()
	ctx, env := newRulesEnv(t)
	const backlog = 300
	var mu sync.Mutex
	inserted := seedEvaluations(t, env.db, 1, backlog+1, 100, 0) // 100 d + 1..300 min
	var next atomic.Int32
	next.Store(10_000)
	// insert adds three evaluations aged ageDays plus a deterministic offset
	// inside the backlog's 5-hour span: some land behind the pass's cursor,
	// some ahead of it.
	insert := func(ageDays int) error {
		var ns, mins []int32
		for range 3 {
			n := next.Add(1)
			ns = append(ns, n)
			mins = append(mins, n*7919%backlog)
		}
		ids, err := insertEvaluations(ctx, env.db, ns, mins, ageDays, 0)
		mu.Lock()
		inserted = append(inserted, ids...)
		mu.Unlock()
		return err
	}

	spec := productionSpec(t)
	inner := spec.Select
	spec.Select = func(ctx context.Context, db prune.DB, p archive.SelectParams) ([]archive.Row, error) {
		rows, err := inner(ctx, db, p)
		if err != nil {
			return nil, err
		}
		// Between this batch's SELECT and its DELETE.
		for _, age := range []int{100, 0} {
			if err := insert(age); err != nil {
				return nil, err
			}
		}
		return rows, nil
	}
	eng := env.engine(t, []archive.TableSpec{spec}, rules.Bookkeep, func(c *archive.Config) { c.BatchSize = 25 })

	// Another writer inserts while the pass runs (a bounded number of
	// times, so the pass's cursor can outrun it).
	stop := make(chan struct{})
	writerErr := make(chan error, 1)
	go func() {
		defer close(writerErr)
		for i := range 150 {
			select {
			case <-stop:
				return
			default:
			}
			if err := insert([]int{100, 95, 1}[i%3]); err != nil {
				writerErr <- err
				return
			}
		}
	}()
	rep, err := eng.RunPass(ctx, 1000)
	close(stop)
	require.NoError(t, <-writerErr)
	require.NoError(t, err)
	require.NoError(t, rep.Err())

	table := map[uuid.UUID]bool{}
	for id := range docs(t, env.db, "true") {
		table[id] = true
	}
	archived := map[uuid.UUID]bool{}
	for _, l := range archivedLines(ctx, t, env.st, rep.Tables[0]) {
		require.False(t, archived[l.id], "%s archived twice", l.id)
		require.False(t, table[l.id], "%s archived but still in the table", l.id)
		archived[l.id] = true
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range inserted {
		require.True(t, table[id] || archived[id], "%s was lost", id)
	}
	require.Equal(t, len(inserted), len(table)+len(archived), "nothing else appeared or vanished")
	require.Equal(t, int64(len(archived)), rep.Tables[0].Archived)
	for _, id := range inserted[:backlog] {
		require.True(t, archived[id], "the seeded backlog is archived")
	}
	var ledgerCount int64
	for _, r := range ledger(t, env.db) {
		ledgerCount += int64(r.RecordCount)
	}
	require.Equal(t, rep.Tables[0].Archived, ledgerCount)
	t.Logf("inserted %d (%d during the pass), archived %d, kept %d", len(inserted), len(inserted)-backlog, len(archived), len(table))
}

// TestArchiveFetchByID (D17): a record id resolves through the ledger's id
// range index to the archive(s) that may hold it, and exactly one archived
// object holds its line; ranges are MIN/MAX, so they never invert, even when
// id order and age order disagree and ranges overlap.
func TestArchiveFetchByID(t *testing.T) {
	t.Parallel()
	ctx, env := newRulesEnv(t)
	// Evaluation i*7 mod 41 is i minutes older than the 100 days: id order
	// is a permutation of age order, so the batches' id ranges overlap.
	var ns, mins []int32
	for i := int32(1); i <= 40; i++ {
		ns = append(ns, i*7%41)
		mins = append(mins, i)
	}
	_, err := insertEvaluations(ctx, env.db, ns, mins, 100, 0)
	require.NoError(t, err)
	want := docs(t, env.db, "true")
	eng := env.engine(t, []archive.TableSpec{productionSpec(t)}, rules.Bookkeep, func(c *archive.Config) { c.BatchSize = 10 })
	rep, err := eng.RunPass(ctx, 10)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	require.Len(t, rep.Tables[0].Archives, 4)
	for _, r := range ledger(t, env.db) {
		require.LessOrEqual(t, r.FirstRecordID.String(), r.LastRecordID.String(), "a range never inverts")
	}

	maxCandidates := 0
	for id, doc := range want {
		rows, err := env.db.Pool.Query(ctx, `SELECT data_key, manifest_key FROM archive_ledger
			WHERE table_name = $2 AND first_record_id <= $1 AND $1 <= last_record_id ORDER BY archive_id`, id, rules.EvaluationsTable)
		require.NoError(t, err)
		type cand struct{ DataKey, ManifestKey string }
		cands, err := pgx.CollectRows(rows, pgx.RowToStructByPos[cand])
		require.NoError(t, err)
		require.NotEmpty(t, cands, "%s resolves to at least one archive", id)
		maxCandidates = max(maxCandidates, len(cands))
		var found []string
		for _, c := range cands {
			_, _, lines := readArchive(ctx, t, env.st, c.DataKey, c.ManifestKey)
			for _, l := range lines {
				if l.id == id {
					found = append(found, l.text)
				}
			}
		}
		require.Equal(t, []string{doc}, found, "%s is in exactly one candidate, verbatim", id)
	}
	require.Greater(t, maxCandidates, 1, "the permuted ids make ranges overlap: lookups scan candidates")

	var plan string
	require.NoError(t, env.db.Pool.QueryRow(ctx, `EXPLAIN (FORMAT TEXT) SELECT data_key FROM archive_ledger
		WHERE first_record_id <= $1 AND $1 <= last_record_id`, evalID(1)).Scan(&plan))
	require.NotEmpty(t, plan)
}
