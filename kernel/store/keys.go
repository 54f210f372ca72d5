package store

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Prefix is the dedicated key prefix of everything the retention toolkit
// writes; the store refuses keys outside it.
const Prefix = "retention-archives/"

// Key layout, all under Prefix:
//
//	retention-archives/<service>/.probe
//	retention-archives/<service>/<table>/<yyyy>/<mm>/<dd>/<archive_id>.ndjson
//	retention-archives/<service>/<table>/<yyyy>/<mm>/<dd>/<archive_id>.manifest.json
//
// No key is a "directory" prefix of another (which a posix-backed store such
// as versitygw, or fileblob, cannot hold: a path cannot be a file and a
// directory at once): every directory level is a validated segment or a date
// part, neither of which contains a dot, every object name contains one, and
// the depth of each kind of key is fixed.
const (
	probeName        = ".probe"
	dataSuffix       = ".ndjson"
	manifestSuffix   = ".manifest.json"
	maxSegmentLength = 63 // PostgreSQL's identifier limit, so every table name fits
	// maxKeyLength is S3's key limit in bytes.
	maxKeyLength = 1024
)

// ArchiveKeys names the two objects of one archive.
type ArchiveKeys struct {
	// Data is the NDJSON object: …/<archive_id>.ndjson.
	Data string
	// Manifest is the manifest object: …/<archive_id>.manifest.json.
	Manifest string
}

// NewArchiveKeys builds the keys of one archive of a service's table, dated
// (UTC) by archivedAt. service, table and archiveID must be non-empty and
// of lowercase [a-z0-9_-] only (a UUID's canonical text qualifies).
func NewArchiveKeys(service, table string, archivedAt time.Time, archiveID string) (ArchiveKeys, error) {
	for _, seg := range []struct{ kind, v string }{{"service", service}, {"table", table}, {"archive id", archiveID}} {
		if err := ValidateSegment(seg.kind, seg.v); err != nil {
			return ArchiveKeys{}, err
		}
	}
	if archivedAt.IsZero() {
		return ArchiveKeys{}, fmt.Errorf("%w: archive time is zero", ErrInvalidKey)
	}
	dir := Prefix + service + "/" + table + "/" + archivedAt.UTC().Format("2006/01/02") + "/" + archiveID
	return ArchiveKeys{Data: dir + dataSuffix, Manifest: dir + manifestSuffix}, nil
}

// ProbeKey is the boot probe's object of a service:
// retention-archives/<service>/.probe.
func ProbeKey(service string) (string, error) {
	if err := ValidateSegment("service", service); err != nil {
		return "", err
	}
	return Prefix + service + "/" + probeName, nil
}

// ValidateSegment checks one key segment (kind names it in the error): non-empty,
// at most 63 bytes, lowercase ASCII letters, digits, '_' and '-' only.
func ValidateSegment(kind, s string) error {
	if s == "" {
		return fmt.Errorf("%w: %s is empty", ErrInvalidKey, kind)
	}
	if len(s) > maxSegmentLength {
		return fmt.Errorf("%w: %s %q is longer than %d bytes", ErrInvalidKey, kind, s, maxSegmentLength)
	}
	for _, c := range []byte(s) {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' && c != '-' {
			return fmt.Errorf("%w: %s %q may hold only lowercase [a-z0-9_-]", ErrInvalidKey, kind, s)
		}
	}
	return nil
}

// ValidateKey checks a key every operation is given: under Prefix, valid
// UTF-8 without control characters or backslashes, at most 1024 bytes, and
// a clean path (no empty, "." or ".." segment, no trailing slash).
func ValidateKey(key string) error {
	rest, ok := strings.CutPrefix(key, Prefix)
	switch {
	case !ok:
		return fmt.Errorf("%w: %q is not under %q", ErrInvalidKey, key, Prefix)
	case len(key) > maxKeyLength:
		return fmt.Errorf("%w: %d bytes > %d", ErrInvalidKey, len(key), maxKeyLength)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: %q is not valid UTF-8", ErrInvalidKey, key)
	case strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }):
		return fmt.Errorf("%w: %q holds a control character or backslash", ErrInvalidKey, key)
	}
	for seg := range strings.SplitSeq(rest, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("%w: %q has an empty, \".\" or \"..\" segment", ErrInvalidKey, key)
		}
	}
	return nil
}
