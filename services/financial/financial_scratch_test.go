package financial_test

import (
	"context"
	"testing"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/services/financial"
	"github.com/stretchr/testify/require"
)

func TestReconcilePolicyDeletesOnlyAgedProcessedRows(t *testing.T) {
	t.Parallel()
	db := kerneltest.NewDB(t, financial.Spec().MigrationSets()...)
	rows := []struct {
		name                   string
		processed, deadLetered string // interval ago, or "" for NULL
		wantKept               bool
	}{
		{"aged processed", "45 days", "", false},
		{"processed just past the window", "31 days", "", false},
		{"fresh processed", "1 day", "", true},
		{"processed inside the window", "29 days", "", true},
		{"aged unprocessed", "", "", true},
		{"aged dead-lettered", "", "45 days", true},
		{"aged processed then dead-lettered", "45 days", "44 days", true},
	}
	for _, r := range rows {
		db.Exec(t, `INSERT INTO subsidy_reconcile_queue (id, created_at, processed_at, dead_lettered_at)
			VALUES (md5($1)::uuid, now() - interval '60 days',
			        now() - NULLIF($2, '')::interval, now() - NULLIF($3, '')::interval)`, r.name, r.processed, r.deadLetered)
	}

	rep, err := prune.PruneTable(context.Background(), db.Pool, financial.ReconcilePolicy(financial.DefaultSettings()))
	require.NoError(t, err)
	require.Equal(t, int64(2), rep.Deleted)
	for _, r := range rows {
		n := db.Count(t, `SELECT count(*) FROM subsidy_reconcile_queue WHERE id = md5($1)::uuid`, r.name)
		if r.wantKept {
			require.Equal(t, int64(1), n, "%s must be kept", r.name)
		} else {
			require.Equal(t, int64(0), n, "%s must be deleted", r.name)
		}
	}
}
