package identity_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/identity"
)

// TestCheck (issue 22 finding 12): subs that could pass for another are
// refused; ordinary ones, accented ones in NFC included, are not.
func TestCheck(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"alice", "ops:alice", "éve", "Zoë Smith", "李雷"} {
		require.NoError(t, identity.Check(ok), ok)
	}
	for name, bad := range map[string]string{
		"trailing space": "alice ", "leading space": " system:retention", "zero-width space": "ali\u200bce",
		"NFD": "e\u0301ve", "control": "al\x07ice", "tab": "alice\t", "invalid utf-8": "al\xffice", "empty": "",
		"bidi override": "\u202ealice",
	} {
		require.ErrorIs(t, identity.Check(bad), identity.ErrInvalid, name)
	}
}

// TestSameAndReserved: one person in two spellings is one identity; the
// reserved prefixes are found however they are spelled.
func TestSameAndReserved(t *testing.T) {
	t.Parallel()
	require.True(t, identity.Same("alice", "Alice"))
	require.True(t, identity.Same("éve", "e\u0301ve"), "NFC and NFD")
	require.True(t, identity.Same("ops:alice", "ops\uff1aalice"), "a fullwidth colon")
	require.True(t, identity.Same("ops:bob", "ops:bоb"), "a Cyrillic o")
	require.False(t, identity.Same("alice", "bob"))
	for _, sub := range []string{"system:retention", "System:retention", "SYSTEM:x", "system\uff1aretention", "\u0455ystem:retention", "ѕуѕtem:x", "cli:root", "CLI:root"} {
		require.True(t, identity.HasReservedPrefix(sub, "system:", "cli:"), sub)
	}
	require.False(t, identity.HasReservedPrefix("ops:system:x", "system:", "cli:"))
}
