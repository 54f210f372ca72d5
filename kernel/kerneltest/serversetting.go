package kerneltest

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// ServerSetting is the test server's value of a setting; when want says it
// does not allow the test (a server left at its defaults), the test fails
// under CI=true and is skipped elsewhere (Optional), naming fix.
func ServerSetting(t testing.TB, d *DB, name string, want func(value string) bool, fix string) string {
	t.Helper()
	var v string
	require.NoError(t, d.Pool.QueryRow(context.Background(), "SELECT current_setting($1)", name).Scan(&v))
	if !want(v) {
		msg := fmt.Sprintf("the test server's %s is %q; this test needs %s", name, v, fix)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + "; CI=true runs every suite")
		}
		t.Skip(msg + "; set CI=true to make this a failure")
	}
	return v
}
