// Package identity checks and compares the identities that act on records
// (a token's sub): an identity that could be mistaken for another is refused,
// and two spellings of one person are one person.
//
// Check refuses a sub with surrounding whitespace, control or format
// characters (a zero-width space), invalid UTF-8, or one not in Unicode NFC:
// such a sub can look like another on every screen and in every ledger. Key
// is the form identities are compared on: NFKC (a fullwidth colon is a
// colon), case-folded (Alice is alice), with the Cyrillic and Greek letters
// that look like Latin ones mapped to them (a Cyrillic ѕ is an s). Dual
// control counts two subs as two people only when their keys differ, and the
// reserved prefixes (system:, cli:) are checked on the key.
package identity

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// MaxLength bounds a sub (bytes): longer ones are refused, not truncated.
const MaxLength = 256

// ErrInvalid is wrapped by every refusal of Check.
var ErrInvalid = errors.New("identity: invalid")

// Check refuses a sub that could be mistaken for another (see the package
// comment).
func Check(sub string) error {
	switch {
	case sub == "":
		return fmt.Errorf("%w: empty", ErrInvalid)
	case len(sub) > MaxLength:
		return fmt.Errorf("%w: longer than %d bytes", ErrInvalid, MaxLength)
	case !utf8.ValidString(sub):
		return fmt.Errorf("%w: not UTF-8", ErrInvalid)
	case strings.TrimSpace(sub) != sub:
		return fmt.Errorf("%w: surrounding whitespace", ErrInvalid)
	case !norm.NFC.IsNormalString(sub):
		return fmt.Errorf("%w: not in Unicode NFC", ErrInvalid)
	}
	for _, r := range sub {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == utf8.RuneError {
			return fmt.Errorf("%w: control or format character U+%04X", ErrInvalid, r)
		}
	}
	return nil
}

// Key is the form identities are compared on (see the package comment).
func Key(sub string) string {
	folded := cases.Fold().String(norm.NFKC.String(sub))
	var b strings.Builder
	b.Grow(len(folded))
	for _, r := range folded {
		if l, ok := latinLookalike[r]; ok {
			r = l
		}
		if unicode.Is(unicode.Cf, r) || unicode.IsSpace(r) && r != ' ' {
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Same reports whether two subs are one identity.
func Same(a, b string) bool { return Key(a) == Key(b) }

// HasReservedPrefix reports whether sub's key begins with one of the
// prefixes (each compared on its own key).
func HasReservedPrefix(sub string, prefixes ...string) bool {
	k := Key(sub)
	for _, p := range prefixes {
		if strings.HasPrefix(strings.TrimLeftFunc(k, unicode.IsSpace), Key(p)) {
			return true
		}
	}
	return false
}

// latinLookalike maps lower-case Cyrillic and Greek letters (Key folds case
// first) that render like a Latin letter to it.
var latinLookalike = map[rune]rune{
	'а': 'a', 'в': 'b', 'с': 'c', 'ԁ': 'd', 'е': 'e', 'һ': 'h', 'і': 'i', 'ј': 'j', 'к': 'k', 'ӏ': 'l', 'м': 'm', 'н': 'h',
	'о': 'o', 'р': 'p', 'ԛ': 'q', 'г': 'r', 'ѕ': 's', 'т': 't', 'у': 'y', 'ѵ': 'v', 'ԝ': 'w', 'х': 'x', 'ү': 'y',
	'α': 'a', 'β': 'b', 'ε': 'e', 'η': 'n', 'ι': 'i', 'κ': 'k', 'ν': 'v', 'ο': 'o', 'ρ': 'p', 'τ': 't', 'υ': 'u', 'χ': 'x',
	'ς': 's', 'σ': 'o',
}
