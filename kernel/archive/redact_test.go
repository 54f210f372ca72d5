package archive_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
)

// TestRedactRowValues: a database error loses every text that may quote a
// row's value and keeps its SQLSTATE; any other error is returned as is.
func TestRedactRowValues(t *testing.T) {
	t.Parallel()
	pg := &pgconn.PgError{Severity: "ERROR", Code: "22P02", Message: `invalid input syntax for type integer: "case-17"`,
		Detail: "case-17", Hint: "case-17", Where: "SQL function rule_evaluations_case: case-17"}
	got := archive.RedactRowValues(fmt.Errorf("subjects of t: %w", pg))
	require.NotContains(t, got.Error(), "case-17")
	require.NotContains(t, fmt.Sprintf("%+v %#v", got, got), "case-17")
	require.Contains(t, got.Error(), "22P02")
	var as *pgconn.PgError
	require.ErrorAs(t, got, &as)
	require.Equal(t, "22P02", as.Code)
	require.NotContains(t, as.Message+as.Detail+as.Hint+as.Where, "case-17")

	other := fmt.Errorf("read: %w", context.Canceled)
	require.Same(t, other, archive.RedactRowValues(other))
	require.ErrorIs(t, archive.RedactRowValues(other), context.Canceled)
	require.NoError(t, archive.RedactRowValues(nil))
	require.False(t, errors.Is(got, pg), "the original error, with its message, is not reachable")
}
