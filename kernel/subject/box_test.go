package subject_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/subject"
)

func TestBoxOpensOnlyUnderItsKey(t *testing.T) {
	t.Parallel()
	k1, err := subject.NewKey([]byte("box test key one, at least 32 bytes long"))
	require.NoError(t, err)
	k2, err := subject.NewKey([]byte("box test key two, at least 32 bytes long"))
	require.NoError(t, err)
	box, err := k1.Box([]byte("case:17"))
	require.NoError(t, err)
	require.NotContains(t, string(box), "case:17", "sealed, not in clear")
	again, err := k1.Box([]byte("case:17"))
	require.NoError(t, err)
	require.NotEqual(t, box, again, "a fresh nonce each time")
	plain, err := k1.Unbox(box)
	require.NoError(t, err)
	require.Equal(t, "case:17", string(plain))
	_, err = k2.Unbox(box)
	require.ErrorIs(t, err, subject.ErrBox)
	tampered := bytes.Clone(box)
	tampered[len(tampered)-1] ^= 1
	_, err = k1.Unbox(tampered)
	require.ErrorIs(t, err, subject.ErrBox)
	_, err = k1.Unbox([]byte{1, 2})
	require.ErrorIs(t, err, subject.ErrBox)
	_, err = subject.Key{}.Box([]byte("x"))
	require.ErrorIs(t, err, subject.ErrKey)
}

func TestCommitment(t *testing.T) {
	t.Parallel()
	s, err := subject.Parse("CASE:0017")
	require.NoError(t, err)
	canon, err := subject.Parse("case:17")
	require.NoError(t, err)
	salt, err := subject.NewSalt()
	require.NoError(t, err)
	require.Len(t, salt, subject.SaltSize)
	other, err := subject.NewSalt()
	require.NoError(t, err)
	require.Equal(t, subject.Commitment(salt, s), subject.Commitment(salt, canon), "over the canonical spelling")
	require.NotEqual(t, subject.Commitment(salt, s), subject.Commitment(other, s), "another salt, another commitment")
	c18, err := subject.Parse("case:18")
	require.NoError(t, err)
	require.NotEqual(t, subject.Commitment(salt, s), subject.Commitment(salt, c18))
	require.Len(t, subject.Commitment(salt, s), 32)
}
