package identity_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/identity"
)

// TestCheck: subs that could pass for another are
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

// TestLookalikesOfTheHostileRound: what a hostile tester passed off as a
// second person or a non-reserved name.
func TestLookalikesOfTheHostileRound(t *testing.T) {
	t.Parallel()
	for _, pair := range [][2]string{
		{"ops:Hans", "ops:\u0397ans"},    // Greek capital Eta
		{"ops:Nina", "ops:\u039dina"},    // Greek capital Nu
		{"ops:Yuri", "ops:\u03a5uri"},    // Greek capital Upsilon
		{"ops:Max", "ops:\u039cax"},      // Greek capital Mu
		{"ops:Zoe", "ops:\u0396oe"},      // Greek capital Zeta
		{"ops:lёna", "ops:lëna"},         // Cyrillic io vs Latin e diaeresis
		{"ops:ѐlla", "ops:èlla"},         // Cyrillic ie grave
		{"ops:kim", "ops:k\u0131m"},      // dotless i
		{"ops:gail", "ops:\u0261ail"},    // script g
		{"ops:oona", "ops:\u0585ona"},    // Armenian o
		{"ops:alice", "ops:alice\u3164"}, // Hangul filler
		{"ops:alice", "ops:ali\ufe0fce"}, // variation selector
	} {
		require.True(t, identity.Same(pair[0], pair[1]), "%q and %q", pair[0], pair[1])
	}
	for _, sub := range []string{"SYSTE\u039c:retention", "\u0405YSTE\u039c:x", "cl\u0131:root", "\u0421LI:root"} {
		require.True(t, identity.HasReservedPrefix(sub, "system:", "cli:"), sub)
	}
	for _, bad := range []string{"ops:alice\u3164", "ops:ali\ufe0fce", "ops:\u115falice"} {
		require.ErrorIs(t, identity.Check(bad), identity.ErrInvalid, "%q", bad)
	}
}

// TestLookalikesOfTheSecondRound: strokes (l, I, 1), digraphs (rn, vv),
// more letters and colons, and the Braille blank.
func TestLookalikesOfTheSecondRound(t *testing.T) {
	t.Parallel()
	for _, pair := range [][2]string{
		{"alice", "aIice"}, {"will", "wi\u01c0\u01c0"}, {"will", "wi\ua4f2\ua4f2"}, {"olga", "0lga"}, {"emma", "ernma"},
		{"walt", "\u0461alt"}, {"carol", "\u03f2arol"}, {"carol", "\u1d04arol"}, {"alice", "\u13aalice"},
		{"yann", "\u03b3ann"}, {"nina", "\u043fina"},
	} {
		require.True(t, identity.Same(pair[0], pair[1]), "%q and %q", pair[0], pair[1])
	}
	for _, sub := range []string{"cIi:ops", "system\ua789x", "system\u2236x", "system\u02f8x", "system\u0589x", "system\u205ax", "\ua731ystem:x", "CLI:root"} {
		require.True(t, identity.HasReservedPrefix(sub, "system:", "cli:"), "%q", sub)
	}
	require.ErrorIs(t, identity.Check("alice\u2800"), identity.ErrInvalid)
	require.False(t, identity.Same("alice", "bob"))
	require.False(t, identity.Same("ops:ann", "ops:anne"))
}
