package pgsession_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/pgsession"
)

// TestPinWinsOverEveryOtherSpelling: PGTZ and a
// lower-case timezone or datestyle in the URL become startup parameters
// under their own names; PostgreSQL takes the last one sent, in random
// order. Pinned pools drop them: every connection is UTC and ISO.
func TestPinWinsOverEveryOtherSpelling(t *testing.T) {
	t.Setenv("PGTZ", "Pacific/Kiritimati")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := kerneltest.NewDB(t)
	pool, err := pgsession.NewPool(ctx, db.URL+"&timezone=America/New_York&datestyle=SQL,DMY&intervalstyle=sql_standard")
	require.NoError(t, err)
	defer pool.Close()
	require.NoError(t, pgsession.CheckPinned(pool))
	for range 20 {
		c, err := pool.Acquire(ctx)
		require.NoError(t, err)
		var tz, ds, is string
		require.NoError(t, c.QueryRow(ctx, `SELECT current_setting('TimeZone'), current_setting('DateStyle'), current_setting('IntervalStyle')`).Scan(&tz, &ds, &is))
		c.Release()
		require.Equal(t, []string{"UTC", "ISO, YMD", "postgres"}, []string{tz, ds, is})
		pool.Reset() // a fresh connection each time
	}
}
