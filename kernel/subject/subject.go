// Package subject is who or what records are about, as the law names them:
// a case or a person. A subject has one canonical spelling whatever a table
// stores ("case:17" for 17, "17", "017" or "case-17"), so two spellings of
// one case are one case; Parse is the only way in from outside.
//
// The archive's subject index never stores a subject in clear: it stores
// Key.Hash, an HMAC-SHA256 under the service's subject key (a file named by
// archive.subject_key_file), so the index, the holds and the events that
// carry it do not list case numbers to anyone who reads the database or the
// broker without the key.
package subject

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
)

// Kind is a subject's kind.
type Kind string

// The kinds of subject.
const (
	Case   Kind = "case"
	Person Kind = "person"
)

// Kinds are every kind, in the order documentation lists them.
func Kinds() []Kind { return []Kind{Case, Person} }

// MaxDigits bounds a subject's number: longer is refused, never truncated
// (no case system numbers beyond 30 digits; a longer one is input to refuse).
const MaxDigits = 30

// maxSpelling bounds a number's spelling, leading zeros included (the
// database's canonical spelling drops any number of them; input this long
// is refused rather than scanned).
const maxSpelling = 256

// ErrInvalid is wrapped by every refusal of Parse.
var ErrInvalid = errors.New("subject: invalid")

// Subject is a canonical subject: a kind and a number without leading zeros.
type Subject struct {
	kind   Kind
	number string
}

// Kind is the subject's kind.
func (s Subject) Kind() Kind { return s.kind }

// String is the canonical spelling, <kind>:<digits>.
func (s Subject) String() string { return string(s.kind) + ":" + s.number }

// IsZero is true for the zero Subject (never returned by Parse).
func (s Subject) IsZero() bool { return s.kind == "" }

// Parse reads a subject: <kind>:<digits>, the kind case-insensitive, the
// number ASCII digits (leading zeros dropped: case:017 is case:17). Anything
// else (a sign, a space, a non-ASCII digit, an unknown kind, an empty or
// over-long number) is an error wrapping ErrInvalid, which never repeats the
// input (a subject is not logged in clear).
func Parse(s string) (Subject, error) {
	k, num, ok := strings.Cut(s, ":")
	if !ok {
		return Subject{}, fmt.Errorf("%w: a subject is <kind>:<digits> with kind one of %v", ErrInvalid, Kinds())
	}
	kind := Kind(strings.ToLower(k))
	if kind != Case && kind != Person {
		return Subject{}, fmt.Errorf("%w: unknown kind (one of %v)", ErrInvalid, Kinds())
	}
	if num == "" || len(num) > maxSpelling {
		return Subject{}, fmt.Errorf("%w: the number is 1 to %d significant ASCII digits", ErrInvalid, MaxDigits)
	}
	for i := 0; i < len(num); i++ {
		if num[i] < '0' || num[i] > '9' {
			return Subject{}, fmt.Errorf("%w: the number is 1 to %d significant ASCII digits", ErrInvalid, MaxDigits)
		}
	}
	num = strings.TrimLeft(num, "0")
	if num == "" {
		num = "0"
	}
	if len(num) > MaxDigits {
		return Subject{}, fmt.Errorf("%w: the number is 1 to %d significant ASCII digits", ErrInvalid, MaxDigits)
	}
	return Subject{kind: kind, number: num}, nil
}

// IsCanonical is true when s is exactly the canonical spelling of a subject
// (what a table's subject function must return).
func IsCanonical(s string) bool {
	p, err := Parse(s)
	return err == nil && p.String() == s
}

// HashSize is the length of a keyed hash in bytes.
const HashSize = sha256.Size

// MinKeyBytes is the shortest subject key accepted: 32 bytes, the HMAC's
// own block of strength (a short key makes case numbers guessable by
// anyone holding the index).
const MinKeyBytes = 32

// ErrKey is wrapped by every refusal of a key.
var ErrKey = errors.New("subject: key")

// Key is a service's subject key. It never prints: String, GoString and
// LogValue say "[redacted]".
type Key struct {
	secret []byte
}

// NewKey returns a key of at least MinKeyBytes bytes.
func NewKey(secret []byte) (Key, error) {
	if len(secret) < MinKeyBytes {
		return Key{}, fmt.Errorf("%w: %d bytes, at least %d", ErrKey, len(secret), MinKeyBytes)
	}
	return Key{secret: append([]byte(nil), secret...)}, nil
}

// LoadKey reads a key file: its content with surrounding whitespace (a
// trailing newline) removed, at least MinKeyBytes bytes. Errors name the
// path, never the content.
func LoadKey(path string) (Key, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Key{}, fmt.Errorf("%w: %w", ErrKey, err)
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxKeyFileBytes {
		return Key{}, fmt.Errorf("%w: %s is not a regular file of at most %d bytes", ErrKey, path, maxKeyFileBytes)
	}
	b, err := os.ReadFile(path) //nolint:gosec // the operator names the file
	if err != nil {
		return Key{}, fmt.Errorf("%w: read %s: %w", ErrKey, path, err)
	}
	k, err := NewKey([]byte(strings.TrimSpace(string(b))))
	if err != nil {
		return Key{}, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// maxKeyFileBytes bounds a key file (a FIFO or a device is refused: a
// read of one could hang the boot).
const maxKeyFileBytes = 4096

// Valid is false for the zero Key (no key configured).
func (k Key) Valid() bool { return len(k.secret) > 0 }

// Hash is the keyed hash of s: HMAC-SHA256(key, canonical spelling).
func (k Key) Hash(s Subject) []byte {
	m := hmac.New(sha256.New, k.secret)
	m.Write([]byte(s.String()))
	return m.Sum(nil)
}

// HashAll is Hash of each subject, in order, with the key's state set up
// once (an archive's batch hashes a thousand subjects: 0.45 µs each
// instead of 1.2).
func (k Key) HashAll(ss []Subject) [][]byte {
	out := make([][]byte, len(ss))
	m := hmac.New(sha256.New, k.secret)
	for i, s := range ss {
		m.Reset()
		m.Write([]byte(s.String()))
		out[i] = m.Sum(nil)
	}
	return out
}

// fingerprintText is what Fingerprint hashes.
const fingerprintText = "craig-retention subject key fingerprint v1"

// Fingerprint identifies the key without revealing it (an HMAC of a fixed
// text under it): the database records the one its index was built with.
func (k Key) Fingerprint() []byte {
	m := hmac.New(sha256.New, k.secret)
	m.Write([]byte(fingerprintText))
	return m.Sum(nil)
}

// String never shows the secret.
func (k Key) String() string { return "[redacted]" }

// GoString never shows the secret.
func (k Key) GoString() string { return "subject.Key{[redacted]}" }

// LogValue never shows the secret.
func (k Key) LogValue() slog.Value { return slog.StringValue("[redacted]") }

// Hex is a keyed hash as the API, the events and the fleet ledger spell it.
func Hex(hash []byte) string { return hex.EncodeToString(hash) }

// ParseHex reads a keyed hash spelled by Hex.
func ParseHex(s string) ([]byte, error) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != HashSize {
		return nil, fmt.Errorf("%w: a subject hash is %d hex digits", ErrInvalid, 2*HashSize)
	}
	return b, nil
}
