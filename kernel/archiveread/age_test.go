package archiveread

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAgeOf: BC dates are read (a range from year 0
// selects 1 BC), infinities are outside every range, anything else
// unreadable is an error, never a row silently left out.
func TestAgeOf(t *testing.T) {
	t.Parallel()
	at, finite, err := ageOf(json.RawMessage(`"0001-06-01T00:00:00+00:00 BC"`))
	require.NoError(t, err)
	require.True(t, finite)
	require.Equal(t, time.Date(0, 6, 1, 0, 0, 0, 0, time.UTC), at.UTC())
	at, _, err = ageOf(json.RawMessage(`"0044-03-15T12:00:00+00:00 BC"`))
	require.NoError(t, err)
	require.Equal(t, -43, at.UTC().Year())
	_, finite, err = ageOf(json.RawMessage(`"-infinity"`))
	require.NoError(t, err)
	require.False(t, finite)
	at, _, err = ageOf(json.RawMessage(`"2026-12-01T10:00:00.123456+00:00"`))
	require.NoError(t, err)
	require.Equal(t, 123456000, at.Nanosecond())
	for _, bad := range []string{`"1883-01-01T00:00:00-04:56:02"`, `12`, `null`, `"yesterday"`} {
		_, _, err := ageOf(json.RawMessage(bad))
		require.Error(t, err, bad)
	}
}
