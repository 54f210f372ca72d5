package archive_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/prune"
)

// generatedRow has the fields sqlc generates for the documented select
// shape, plus one more (ignored).
type generatedRow struct {
	ID       uuid.UUID
	AtKey    string
	At       time.Time
	DocBytes int64
	Withheld bool
	Doc      string
	Extra    int
}

func TestSelectRowsMapsTheGeneratedRow(t *testing.T) {
	t.Parallel()
	id := uuid.Must(uuid.NewV7())
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	var got archive.SelectParams
	sel := archive.SelectRows(func(_ context.Context, _ prune.DB, p archive.SelectParams) ([]generatedRow, error) {
		got = p
		return []generatedRow{
			{ID: id, AtKey: "-infinity", At: at, DocBytes: 3, Doc: `{}`},
			{ID: id, AtKey: "k", At: at, DocBytes: 99, Withheld: true},
		}, nil
	})
	p := archive.SelectParams{HotWindowDays: 90, After: archive.Start, Limit: 7, MaxBytes: 4096}
	rows, err := sel(context.Background(), nil, p)
	require.NoError(t, err)
	require.Equal(t, p, got, "the query gets the pass's parameters")
	require.Equal(t, []archive.Row{
		{ID: id, Key: "-infinity", At: at, Size: 3, Doc: `{}`},
		{ID: id, Key: "k", At: at, Size: 99, Withheld: true},
	}, rows)
}

func TestSelectRowsRefusesAnotherShape(t *testing.T) {
	t.Parallel()
	type missingDoc struct {
		ID       uuid.UUID
		AtKey    string
		At       time.Time
		DocBytes int64
		Withheld bool
	}
	sel := archive.SelectRows(func(context.Context, prune.DB, archive.SelectParams) ([]missingDoc, error) {
		return []missingDoc{{}}, nil
	})
	_, err := sel(context.Background(), nil, archive.SelectParams{})
	require.ErrorIs(t, err, archive.ErrConfig)
	require.ErrorContains(t, err, "field Doc of type string")

	type wrongType struct {
		ID       string
		AtKey    string
		At       time.Time
		DocBytes int64
		Withheld bool
		Doc      string
	}
	_, err = archive.SelectRows(func(context.Context, prune.DB, archive.SelectParams) ([]wrongType, error) {
		return nil, nil
	})(context.Background(), nil, archive.SelectParams{})
	require.ErrorContains(t, err, "field ID of type uuid.UUID")
}
