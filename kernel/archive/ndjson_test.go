package archive_test

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
)

// TestNDJSONStreamsTheEncoding: the streamed object is byte for byte
// EncodeNDJSON's, read in any chunk size, after any seek, with the same
// sha256 (deterministic seed).
func TestNDJSONStreamsTheEncoding(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(9, 9))
	for round := range 200 {
		rows := make([]archive.Row, rng.IntN(6))
		for i := range rows {
			rows[i].Doc = strings.Repeat(string(rune('a'+rng.IntN(26))), rng.IntN(40))
		}
		want := archive.EncodeNDJSON(rows)
		n := archive.NewNDJSON(rows)
		require.Equal(t, int64(len(want)), n.Size())
		require.Equal(t, archive.SHA256Hex(want), n.SHA256Hex(), "round %d", round)

		buf := make([]byte, 1+rng.IntN(7))
		var got bytes.Buffer
		for {
			k, err := n.Read(buf)
			got.Write(buf[:k])
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err)
		}
		require.Equal(t, want, got.Bytes(), "round %d", round)

		off := int64(rng.IntN(len(want) + 2))
		pos, err := n.Seek(off, io.SeekStart)
		require.NoError(t, err)
		require.Equal(t, off, pos)
		rest, err := io.ReadAll(n)
		require.NoError(t, err)
		if off < int64(len(want)) {
			require.Equal(t, want[off:], rest, "round %d: after Seek(%d)", round, off)
		} else {
			require.Empty(t, rest)
		}
		end, err := n.Seek(0, io.SeekEnd)
		require.NoError(t, err)
		require.Equal(t, n.Size(), end)
		_, err = n.Seek(-1, io.SeekStart)
		require.ErrorIs(t, err, archive.ErrSeek)
	}
}

// TestNDJSONHashSpansItsBuffer: an object several times the hash's buffer,
// hashed from the middle of a read, hashes whole and rewinds.
func TestNDJSONHashSpansItsBuffer(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(28, 5))
	rows := make([]archive.Row, 300)
	for i := range rows {
		rows[i].Doc = strings.Repeat(string(rune('a'+rng.IntN(26))), rng.IntN(3000))
	}
	want := archive.EncodeNDJSON(rows)
	require.Greater(t, len(want), 4*64<<10)
	n := archive.NewNDJSON(rows)
	_, err := io.CopyN(io.Discard, n, int64(len(want)/3))
	require.NoError(t, err)
	require.Equal(t, archive.SHA256Hex(want), n.SHA256Hex())
	got, err := io.ReadAll(n)
	require.NoError(t, err)
	require.Equal(t, want, got, "SHA256Hex leaves the position at the start")
}
