package archivetest

import (
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
)

// testCrashResume: the puts succeed, then the prune
// transaction aborts (fault injection). Nothing is deleted, no ledger row
// or event exists; the next pass re-archives the same rows under a NEW
// archive id and prunes, and the first pass's objects are the only residue.
func testCrashResume(t *testing.T, s suite) {
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
			e := s.env(t)
			aged := e.seed(t, 1, 31, 100, 0)
			before := e.docs(t, "true")
			var armed atomic.Bool
			armed.Store(true)
			spec, bk := e.table.Spec, archive.BookkeepFunc(nil)
			switch tt.fault {
			case "bookkeep":
				bk = crashAfterBookkeep(e.table.Bookkeeper, &armed)
			case "mismatch", "delete":
				spec.Delete = faultyDelete(spec.Delete, &armed, tt.fault == "delete")
			}
			eng := e.engine(t, []archive.TableSpec{spec}, bk, nil)

			rep, err := eng.RunPass(e.ctx, 5)
			require.NoError(t, err)
			tr := rep.Tables[0]
			require.ErrorIs(t, tr.Err, tt.wantKind)
			if tt.fault == "mismatch" {
				require.ErrorContains(t, tr.Err, "delete removed 29 rows of the 30 archived")
			}
			require.False(t, rep.More, "an error-stopped table reports no more")
			require.Zero(t, tr.Archived)
			require.Empty(t, tr.Archives)
			require.Equal(t, before, e.docs(t, "true"), "every row intact, the count-mismatch victim included")
			require.Empty(t, e.ledger(t))
			require.Empty(t, e.events(t))
			orphans := e.h.Keys(t)
			require.Len(t, orphans, 2, "the aborted pass left its data and manifest")
			orphanManifest, orphanData, _ := ReadArchive(e.ctx, t, e.h.Store, orphans[1], orphans[0]) // sorted: .manifest.json < .ndjson

			tr = e.pass(t, eng, 5).Tables[0]
			require.Equal(t, int64(len(aged)), tr.Archived)
			require.Len(t, tr.Archives, 1)
			require.NotEqual(t, orphanManifest.ArchiveID, tr.Archives[0].ArchiveID, "re-archived under a NEW archive id")
			m, data, _ := ReadArchive(e.ctx, t, e.h.Store, tr.Archives[0].DataKey, tr.Archives[0].ManifestKey)
			require.Equal(t, orphanData, data, "the same rows, byte for byte")
			require.Equal(t, orphanManifest.DataSHA256, m.DataSHA256)
			require.Zero(t, e.rows(t, "true"))
			rows := e.ledger(t)
			require.Len(t, rows, 1)
			require.Equal(t, m.ArchiveID, rows[0].ArchiveID)
			require.Len(t, e.events(t), 1)
			require.ElementsMatch(t, append(orphans, m.DataKey, m.ManifestKey), e.h.Keys(t),
				"the first pass's two objects are the only residue")
			require.Zero(t, e.count(t, `SELECT count(*) FROM archive_ledger WHERE archive_id = $1`, orphanManifest.ArchiveID),
				"no ledger row names the orphans (orphan GC is local-ledger-only)")
		})
	}
}

// testOutboxGone: with event_outbox renamed away, staging fails INSIDE the
// prune transaction after the ledger insert, so everything rolls back: no
// ledger row without its event, no deleted row; once it is back, the next
// pass archives.
func testOutboxGone(t *testing.T, s suite) {
	e := s.env(t)
	e.seed(t, 1, 16, 100, 0)
	before := e.docs(t, "true")
	e.exec(t, `ALTER TABLE event_outbox RENAME TO event_outbox_gone`)
	eng := e.engine(t, nil, nil, nil)

	rep, err := eng.RunPass(e.ctx, 5)
	require.NoError(t, err)
	tr := rep.Tables[0]
	require.ErrorIs(t, tr.Err, archive.ErrBookkeep)
	require.ErrorContains(t, tr.Err, "stage "+e.table.Bookkeeper.EventType)
	require.ErrorContains(t, tr.Err, "event_outbox")
	require.Zero(t, tr.Archived)
	require.Empty(t, e.ledger(t), "the ledger insert rolled back with the failed staging")
	require.Equal(t, before, e.docs(t, "true"), "no row deleted")
	require.Zero(t, e.count(t, `SELECT count(*) FROM event_outbox_gone`))
	require.Equal(t, 1.0, testutil.ToFloat64(e.m.Failures.WithLabelValues(e.table.Spec.Table, "bookkeep")))

	e.exec(t, `ALTER TABLE event_outbox_gone RENAME TO event_outbox`)
	rep = e.pass(t, eng, 5)
	require.Equal(t, int64(15), rep.Tables[0].Archived)
	require.Len(t, e.ledger(t), 1)
	require.Len(t, e.events(t), 1)
	require.Zero(t, e.rows(t, "true"))
}
