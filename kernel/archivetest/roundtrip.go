package archivetest

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/store"
)

// testInsertOnly: an archived table refuses UPDATE (the kernel's trigger),
// so a line once archived is the row as it was.
func testInsertOnly(t *testing.T, s suite) {
	e := s.env(t)
	require.NoError(t, archive.CheckInsertOnly(e.ctx, e.h.Pool, []archive.TableSpec{e.table.Spec}), "%s: archived tables are insert-only", e.table.Spec.Table)
}

// testRoundTrip: aged rows go to the real store byte for
// byte, with a manifest that verifies, ONE ledger row and ONE staged event
// carrying the ledger's facts; fresh rows (and the row an hour inside the
// window) stay unchanged.
func testRoundTrip(t *testing.T, s suite) {
	e := s.env(t)
	hot := time.Duration(archive.DefaultHotWindowDays) * 24 * time.Hour
	aged := append(e.seed(t, 1, 121, 100, 0), e.seedAt(t, 5000, hot+time.Hour))
	fresh := append(e.seed(t, 1000, 1010, 10, 0), e.seedAt(t, 5001, hot-time.Hour))
	wantDocs := e.docs(t, e.agedWhere())
	require.Equal(t, idSet(aged), idSet(slices.Collect(maps.Keys(wantDocs))))
	freshDocs := e.docs(t, "NOT ("+e.agedWhere()+")")
	require.Equal(t, idSet(fresh), idSet(slices.Collect(maps.Keys(freshDocs))))
	var minID, maxID uuid.UUID
	var minAt, maxAt time.Time
	require.NoError(t, e.h.Pool.QueryRow(e.ctx, `SELECT min(t.id::text)::uuid, max(t.id::text)::uuid, min(`+e.age+`), max(`+e.age+`)
		FROM `+e.ident+` AS t WHERE `+e.agedWhere()).Scan(&minID, &maxID, &minAt, &maxAt))

	rep := e.pass(t, e.engine(t, nil, nil, nil), archive.DefaultManualBudget)
	require.False(t, rep.More)
	require.Len(t, rep.Tables, 1)
	tr := rep.Tables[0]
	require.Equal(t, e.table.Spec.Table, tr.Table)
	require.Equal(t, int64(len(aged)), tr.Archived)
	require.Zero(t, tr.Quarantined)
	require.Nil(t, tr.Error)
	require.Len(t, tr.Archives, 1)

	m, _, lines := ReadArchive(e.ctx, t, e.h.Store, tr.Archives[0].DataKey, tr.Archives[0].ManifestKey)
	checkLines(t, wantDocs, lines)
	// Range: MIN/MAX, not the first and last lines (ids run against age).
	require.Equal(t, minID, m.FirstRecordID)
	require.Equal(t, maxID, m.LastRecordID)
	require.NotEqual(t, lines[0].ID, m.FirstRecordID, "the oldest row does not have the smallest id here")
	require.True(t, minAt.Equal(m.FirstRecordAt), "%v vs %v", minAt, m.FirstRecordAt)
	require.True(t, maxAt.Equal(m.LastRecordAt), "%v vs %v", maxAt, m.LastRecordAt)
	checkManifest(t, e, m)

	require.Empty(t, e.docs(t, e.agedWhere()), "no aged row left")
	require.Equal(t, freshDocs, e.docs(t, "true"), "every fresh row kept, unchanged")
	l := checkLedger(t, e, m)
	checkEvent(t, e, l)
	require.Equal(t, float64(len(aged)), testutil.ToFloat64(e.m.RowsArchived.WithLabelValues(e.table.Spec.Table)))
	require.ElementsMatch(t, []string{m.DataKey, m.ManifestKey}, e.h.Keys(t))
}

// checkLines: every line is exactly the row's to_jsonb text captured before
// the pass, each row once, oldest first.
func checkLines(t *testing.T, want map[uuid.UUID]string, lines []Line) {
	t.Helper()
	got := map[uuid.UUID]string{}
	for _, l := range lines {
		require.NotContains(t, got, l.ID, "a row is archived once")
		got[l.ID] = l.Text
	}
	require.Equal(t, want, got)
}

// checkManifest: the manifest names the service, table, format, window,
// actor and the table's columns with their fingerprint.
func checkManifest(t *testing.T, e *env, m archive.Manifest) {
	t.Helper()
	require.Equal(t, e.h.Service, m.Service)
	require.Equal(t, e.table.Spec.Table, m.Table)
	require.Equal(t, archive.Format, m.Format)
	require.Equal(t, archive.DefaultHotWindowDays, m.HotWindowDays)
	require.Equal(t, archive.SystemActor, m.ArchivedBy)
	cols, err := archive.TableColumns(e.ctx, e.h.Pool, e.table.Spec.Table)
	require.NoError(t, err)
	require.Equal(t, cols, m.Columns)
	require.Equal(t, archive.Fingerprint(cols), m.Fingerprint)
}

// checkLedger: ONE ledger row, carrying the manifest's facts.
func checkLedger(t *testing.T, e *env, m archive.Manifest) LedgerRow {
	t.Helper()
	ident := e.h.Store.Identity()
	require.NotEmpty(t, ident.Endpoint)
	require.NotEmpty(t, ident.Bucket)
	rows := e.ledger(t)
	require.Len(t, rows, 1)
	l := rows[0]
	require.Equal(t, LedgerRow{
		ArchiveID: m.ArchiveID, TableName: m.Table, DataKey: m.DataKey, ManifestKey: m.ManifestKey,
		DataSHA256: m.DataSHA256, RecordCount: int32(m.RecordCount), StoreEndpoint: ident.Endpoint, StoreBucket: ident.Bucket,
		FirstRecordID: m.FirstRecordID, LastRecordID: m.LastRecordID, FirstRecordAt: l.FirstRecordAt, LastRecordAt: l.LastRecordAt,
		HotWindowDays: int32(m.HotWindowDays), ArchivedAt: l.ArchivedAt, ArchivedBy: archive.SystemActor,
	}, l)
	require.True(t, l.FirstRecordAt.Equal(m.FirstRecordAt))
	require.True(t, l.LastRecordAt.Equal(m.LastRecordAt))
	require.True(t, l.ArchivedAt.Equal(m.ArchivedAt.Truncate(time.Microsecond)))
	return l
}

// checkEvent: ONE staged (unpublished) event of the Bookkeeper's type,
// with exactly archive.ArchivedEvent's fields and the ledger's values.
func checkEvent(t *testing.T, e *env, l LedgerRow) {
	t.Helper()
	events := e.events(t)
	require.Len(t, events, 1)
	ev := events[0]
	require.Equal(t, e.table.Bookkeeper.EventType, ev.EventType)
	require.True(t, ev.Pending, "staged, not yet published")
	var fields map[string]any
	b, err := json.Marshal(archive.ArchivedEvent{})
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &fields))
	require.ElementsMatch(t, slices.Collect(maps.Keys(fields)), slices.Collect(maps.Keys(ev.Payload)))
	p := ev.Payload
	for field, want := range map[string]any{
		"source_service": e.table.Bookkeeper.SourceService, "archive_id": l.ArchiveID.String(), "table": l.TableName,
		"data_key": l.DataKey, "manifest_key": l.ManifestKey, "data_sha256": l.DataSHA256,
		"record_count": json.Number(fmt.Sprint(l.RecordCount)), "store_endpoint": l.StoreEndpoint, "store_bucket": l.StoreBucket,
		"first_record_id": l.FirstRecordID.String(), "last_record_id": l.LastRecordID.String(),
		"hot_window_days": json.Number(fmt.Sprint(l.HotWindowDays)), "archived_by": l.ArchivedBy,
	} {
		require.Equal(t, want, p[field], field)
	}
	for field, want := range map[string]time.Time{"first_record_at": l.FirstRecordAt, "last_record_at": l.LastRecordAt, "archived_at": l.ArchivedAt} {
		at, err := time.Parse(time.RFC3339Nano, p[field].(string))
		require.NoError(t, err, field)
		require.True(t, want.Equal(at), "%s: %v vs ledger %v", field, at, want)
	}
}

// testNoOverwrite: PutCreate on an archive's keys, as a retry or a confused
// writer would, is refused with ErrAlreadyExists and the original bytes
// stay.
func testNoOverwrite(t *testing.T, s suite) {
	e := s.env(t)
	e.seed(t, 1, 11, 100, 0)
	ref := e.pass(t, e.engine(t, nil, nil, nil), 1).Tables[0].Archives[0]
	origData, err := e.h.Store.Get(e.ctx, ref.DataKey)
	require.NoError(t, err)
	origManifest, err := e.h.Store.Get(e.ctx, ref.ManifestKey)
	require.NoError(t, err)

	for key, orig := range map[string][]byte{ref.DataKey: origData, ref.ManifestKey: origManifest} {
		for _, tamper := range [][]byte{[]byte("tampered\n"), {}, append(slices.Clone(orig), '\n')} {
			err := e.h.Store.PutCreate(e.ctx, key, tamper, store.ContentTypeNDJSON)
			require.ErrorIs(t, err, store.ErrAlreadyExists, key)
		}
		got, err := e.h.Store.Get(e.ctx, key)
		require.NoError(t, err)
		require.Equal(t, orig, got, "%s is untouched", key)
	}
	require.Equal(t, e.ledger(t)[0].DataSHA256, archive.SHA256Hex(origData))
}
