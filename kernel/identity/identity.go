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
		if unicode.IsControl(r) || ignorable(r) || r == utf8.RuneError {
			return fmt.Errorf("%w: control, format or invisible character U+%04X", ErrInvalid, r)
		}
	}
	return nil
}

// Key is the form identities are compared on (see the package comment):
// NFKD (a fullwidth colon is a colon, ё is е and a diaeresis), without
// combining marks, format characters or default-ignorable code points (a
// Hangul filler), with Cyrillic, Greek and other letters that render like a
// Latin one mapped to it (before and after case folding: the capital Η looks
// like H, its lower case η like n), case-folded. Two subs with one key are
// one person; the mapping errs towards "the same person" (éve and eve are),
// which for dual control means a refusal, never a second approver.
func Key(sub string) string {
	var b strings.Builder
	b.Grow(len(sub))
	// Lookalikes first on the letters as written (NFKD turns some into
	// others: the lunate sigma ϲ, read as c, into ς), then on what NFKD and
	// case folding make of them.
	sub = strings.Map(func(r rune) rune {
		if l, ok := latinLookalike[r]; ok {
			return l
		}
		return r
	}, sub)
	for _, r := range norm.NFKD.String(sub) {
		if ignorable(r) || unicode.Is(unicode.Mn, r) {
			continue
		}
		if l, ok := latinLookalike[r]; ok {
			r = l
		}
		b.WriteRune(r)
	}
	folded := cases.Fold().String(b.String())
	b.Reset()
	for _, r := range folded {
		if l, ok := latinLookalike[r]; ok {
			r = l
		}
		b.WriteRune(r)
	}
	return lookalikeRuns.Replace(b.String())
}

// ignorable is a code point that renders as nothing: a format character,
// a default-ignorable one (Hangul fillers, U+3164 among them) or a
// variation selector.
func ignorable(r rune) bool {
	return unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r) || unicode.Is(unicode.Variation_Selector, r) ||
		r == '\u2800' // Braille blank: a letter that renders as nothing
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

// latinLookalike maps letters that render like a Latin letter to it
// (capitals and small letters of Cyrillic and Greek, and a few others): a
// confusable skeleton for the letters an identity is likely to use.
var latinLookalike = map[rune]rune{
	// Cyrillic capitals and small letters.
	'А': 'a', 'В': 'b', 'С': 'c', 'Е': 'e', 'Н': 'h', 'І': 'i', 'Ј': 'j', 'К': 'k', 'М': 'm', 'О': 'o', 'Р': 'p', 'Ѕ': 's',
	'Т': 't', 'Х': 'x', 'У': 'y', 'Ү': 'y', 'Ԛ': 'q', 'Ԝ': 'w', 'Һ': 'h', 'Ԁ': 'd',
	'а': 'a', 'в': 'b', 'с': 'c', 'ԁ': 'd', 'е': 'e', 'һ': 'h', 'і': 'i', 'ј': 'j', 'к': 'k', 'м': 'm', 'н': 'h',
	'о': 'o', 'р': 'p', 'ԛ': 'q', 'г': 'r', 'ѕ': 's', 'т': 't', 'у': 'y', 'ѵ': 'v', 'ԝ': 'w', 'х': 'x', 'ү': 'y',
	// Greek capitals and small letters.
	'Α': 'a', 'Β': 'b', 'Ε': 'e', 'Ζ': 'z', 'Η': 'h', 'Ι': 'i', 'Κ': 'k', 'Μ': 'm', 'Ν': 'n', 'Ο': 'o', 'Ρ': 'p', 'Τ': 't',
	'Υ': 'y', 'Χ': 'x',
	'α': 'a', 'β': 'b', 'ε': 'e', 'η': 'n', 'ι': 'i', 'κ': 'k', 'μ': 'u', 'ν': 'v', 'ο': 'o', 'ρ': 'p', 'τ': 't', 'υ': 'u',
	'χ': 'x', 'ς': 's', 'σ': 'o', 'ζ': 'z',
	// Latin and Armenian letters that pass for plain ones.
	'ı': 'i', 'ɩ': 'i', 'ɑ': 'a', 'ɡ': 'g', 'ʏ': 'y', 'օ': 'o', 'ո': 'n', 'ս': 'u', 'ց': 'g', 'հ': 'h',
	'ᴄ': 'c', 'ꜱ': 's', 'ϲ': 'c', 'Ϲ': 'c', 'Ꭺ': 'a', 'ѡ': 'w', 'γ': 'y', 'п': 'n',
	// One class for the strokes: l, I, 1, |, ǀ, ꓲ (and i) read alike; 0 is o.
	'l': 'i', 'I': 'i', '1': 'i', '|': 'i', 'ǀ': 'i', 'ꓲ': 'i', 'Ӏ': 'i', 'ӏ': 'i', '0': 'o',
	// Colons.
	'꞉': ':', '∶': ':', '˸': ':', '։': ':', '⁚': ':', '׃': ':',
}

// lookalikeRuns are letter pairs that read as one letter (after the
// single letters are mapped): rn is m, vv is w.
var lookalikeRuns = strings.NewReplacer("rn", "m", "vv", "w")
