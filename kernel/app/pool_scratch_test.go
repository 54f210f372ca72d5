package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/kerneltest"
)

// TestOpenPoolPinsUTC: a database configured for
// another zone, date style and interval style still gives every kernel
// connection UTC, ISO dates and PostgreSQL intervals, so a date, a cutoff or
// a partition bound means the same instant whatever the server's defaults.
func TestOpenPoolPinsUTC(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := kerneltest.NewDB(t, kerneltest.ArchivingFixture()...)
	name := pgx.Identifier{db.Name}.Sanitize()
	db.Exec(t, "ALTER DATABASE "+name+" SET timezone = 'Pacific/Kiritimati'")
	db.Exec(t, "ALTER DATABASE "+name+" SET datestyle = 'SQL, DMY'")
	db.Exec(t, "ALTER DATABASE "+name+" SET intervalstyle = 'sql_standard'")
	db.Exec(t, "ALTER DATABASE "+name+" SET timezone_abbreviations = 'Australia'")
	pool, err := app.OpenPool(ctx, db.URL+"&options=-c%20TimeZone%3DAmerica%2FNew_York", 5*time.Second)
	require.NoError(t, err)
	defer pool.Close()
	for range 3 { // several connections of the pool
		var tz, ds, is string
		var d time.Time
		require.NoError(t, pool.QueryRow(ctx, `SELECT current_setting('TimeZone'), current_setting('DateStyle'), current_setting('IntervalStyle'), CURRENT_DATE`).Scan(&tz, &ds, &is, &d))
		require.Equal(t, "UTC", tz)
		require.Equal(t, "ISO, YMD", ds)
		require.Equal(t, "postgres", is)
		require.Equal(t, time.Now().UTC().Format(time.DateOnly), d.Format(time.DateOnly))
	}
}
