package app_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/kerneltest"
)

// TestCommandsFailInsteadOfHangingOnASilentDatabase: `sweep --once` (and every command) hung on a database that accepts
// connections and never answers. database_connect_timeout bounds it; the
// error names the database.
func TestCommandsFailInsteadOfHangingOnASilentDatabase(t *testing.T) {
	t.Parallel()
	addr := kerneltest.SilentServer(t)
	env := []string{
		"CRAIG_EXCHANGE__DATABASE_URL=postgres://u:Sup3rS3cret@" + addr + "/x?sslmode=disable",
		"CRAIG_EXCHANGE__DATABASE_CONNECT_TIMEOUT=1s",
	}
	for _, args := range [][]string{{"sweep", "--once"}, {"sweep", "--once", "--dry-run"}, {"invariants"}, {"probe"}, {"migrate"}, {"serve"}} {
		t.Run(args[0], func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			code := app.Run(ctx, testSpec(), args, &out, &errOut, env)
			took := time.Since(start)
			require.NotEqual(t, app.ExitOK, code, errOut.String())
			require.Less(t, took, 10*time.Second, "bounded by database_connect_timeout, not the test's 30 s")
			require.NoError(t, ctx.Err(), "the command returned by itself")
			require.Contains(t, errOut.String(), addr, "the error names the database")
			require.NotContains(t, errOut.String(), "Sup3rS3cret")
		})
	}
}
