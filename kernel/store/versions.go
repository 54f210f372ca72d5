package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// ErrNoMatchingVersion is wrapped when no version of an object has the
// expected content.
var ErrNoMatchingVersion = errors.New("store: no version of the object has the expected content")

// ErrUnreadable is wrapped when the store answered a read but could not
// give the object's bytes whole (damaged on its disk, or cut off mid-body).
var ErrUnreadable = errors.New("store: the object could not be read whole")

// Found is an object's content found by GetMatching.
type Found struct {
	Data []byte
	// VersionID is the version the content came from when it is not the
	// current one (an overwrite or a delete marker hid it); empty when the
	// current version matched.
	VersionID string
}

// GetMatching returns the content stored under key that matches: the
// current version's when it does, else (in a versioned bucket) the newest
// older version's that does. Object Lock protects versions, not the
// current pointer: an overwrite or a delete marker made with the store's
// credentials must not make a held archive unreadable. When nothing
// matches, the error wraps ErrNotFound (no version at all) or
// ErrNoMatchingVersion.
func (s *Store) GetMatching(ctx context.Context, key string, match func([]byte) bool) (Found, error) {
	data, err := s.Get(ctx, key)
	if err == nil && match(data) {
		return Found{Data: data}, nil
	}
	if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrUnreadable) {
		return Found{}, err
	}
	if s.s3 == nil {
		if err != nil {
			return Found{}, err
		}
		return Found{}, fmt.Errorf("%w: %s", ErrNoMatchingVersion, key)
	}
	versions, lerr := s.versionsOf(ctx, key)
	if lerr != nil {
		return Found{}, lerr
	}
	for _, v := range versions {
		old, gerr := s.getVersion(ctx, key, v)
		if gerr != nil {
			continue
		}
		if match(old) {
			return Found{Data: old, VersionID: v}, nil
		}
	}
	if err != nil {
		return Found{}, err
	}
	return Found{}, fmt.Errorf("%w: %s", ErrNoMatchingVersion, key)
}

// SHA256Matches is a GetMatching predicate: the content's sha256 is want.
func SHA256Matches(want string) func([]byte) bool {
	return func(b []byte) bool {
		sum := sha256.Sum256(b)
		return hex.EncodeToString(sum[:]) == want
	}
}

// Restore makes an older version of key its current version again (a
// server-side copy), for an object whose current version an overwrite or a
// delete marker replaced. The old version stays as it was.
func (s *Store) Restore(ctx context.Context, key, versionID string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if s.s3 == nil {
		return fmt.Errorf("store: restore %s: the %s backend has no versions", key, s.scheme)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	src := s.identity.Bucket + "/" + url.PathEscape(key) + "?versionId=" + url.QueryEscape(versionID)
	_, err := s.s3.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String(s.identity.Bucket), Key: aws.String(key), CopySource: aws.String(src)})
	if err != nil {
		return fmt.Errorf("store: restore %s version %s: %w", key, versionID, timedOut(ctx, err))
	}
	return nil
}

// versionsOf lists key's versions (not its delete markers), newest first.
func (s *Store) versionsOf(ctx context.Context, key string) ([]string, error) {
	vs, _, err := s.allVersions(ctx, key)
	if err != nil {
		return nil, err
	}
	sort.SliceStable(vs, func(i, j int) bool { return aws.ToTime(vs[i].LastModified).After(aws.ToTime(vs[j].LastModified)) })
	ids := make([]string, len(vs))
	for i, v := range vs {
		ids[i] = aws.ToString(v.VersionId)
	}
	return ids, nil
}

// allVersions lists every version and delete marker of exactly key, page
// by page (a listing stops at 1,000 entries: an object overwritten more
// often, or many keys sharing its prefix, would otherwise hide versions).
func (s *Store) allVersions(ctx context.Context, key string) ([]types.ObjectVersion, []types.DeleteMarkerEntry, error) {
	var versions []types.ObjectVersion
	var markers []types.DeleteMarkerEntry
	var keyMarker, versionMarker *string
	for {
		lctx, cancel := s.bound(ctx)
		out, err := s.s3.ListObjectVersions(lctx, &s3.ListObjectVersionsInput{Bucket: aws.String(s.identity.Bucket), Prefix: aws.String(key),
			KeyMarker: keyMarker, VersionIdMarker: versionMarker})
		if err != nil {
			err = timedOut(lctx, err)
			cancel()
			return nil, nil, fmt.Errorf("store: list versions of %s: %w", key, err)
		}
		cancel()
		for _, v := range out.Versions {
			if aws.ToString(v.Key) == key {
				versions = append(versions, v)
			}
		}
		for _, m := range out.DeleteMarkers {
			if aws.ToString(m.Key) == key {
				markers = append(markers, m)
			}
		}
		if !aws.ToBool(out.IsTruncated) || (out.NextKeyMarker == nil && out.NextVersionIdMarker == nil) {
			return versions, markers, nil
		}
		if aws.ToString(out.NextKeyMarker) > key {
			return versions, markers, nil // past every version of key
		}
		keyMarker, versionMarker = out.NextKeyMarker, out.NextVersionIdMarker
	}
}

// getVersion reads one version of key (at most the object cap).
func (s *Store) getVersion(ctx context.Context, key, versionID string) ([]byte, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	out, err := s.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.identity.Bucket), Key: aws.String(key), VersionId: aws.String(versionID)})
	if err != nil {
		if versionGone(err) {
			return nil, fmt.Errorf("store: get %s version %s: %w", key, versionID, ErrNotFound)
		}
		return nil, fmt.Errorf("store: get %s version %s: %w", key, versionID, timedOut(ctx, err))
	}
	defer func() { _ = out.Body.Close() }()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, io.LimitReader(out.Body, maxObjectBytes+1)); err != nil {
		return nil, fmt.Errorf("store: get %s version %s: %w", key, versionID, timedOut(ctx, err))
	}
	if int64(buf.Len()) > maxObjectBytes {
		return nil, fmt.Errorf("store: get %s version %s: %w", key, versionID, ErrTooLarge)
	}
	return buf.Bytes(), nil
}

// releaseVersions turns off the legal hold of every version of key (the
// ledger, which the caller has checked, is the authority: a purge of a due,
// unheld archive destroys every version, including those an overwrite left
// behind under the hold they had).
func (s *Store) releaseVersions(ctx context.Context, key string) error {
	versions, err := s.versionsOf(ctx, key)
	if err != nil {
		return err
	}
	for _, v := range versions {
		vctx, cancel := s.bound(ctx)
		_, err := s.s3.PutObjectLegalHold(vctx, &s3.PutObjectLegalHoldInput{
			Bucket: aws.String(s.identity.Bucket), Key: aws.String(key), VersionId: aws.String(v),
			LegalHold: &types.ObjectLockLegalHold{Status: types.ObjectLockLegalHoldStatusOff},
		})
		cancel()
		if err != nil && !versionGone(err) {
			return fmt.Errorf("store: release legal hold of %s version %s: %w", key, v, err)
		}
	}
	return nil
}

// DestroyReleased releases the legal hold of every version of key, then
// destroys every version and delete marker (DestroyAllVersions): what a
// purge does to an archive the ledger says is due and unheld.
func (s *Store) DestroyReleased(ctx context.Context, key string) (bool, error) {
	if err := ValidateKey(key); err != nil {
		return false, err
	}
	if s.s3 != nil {
		if err := s.releaseVersions(ctx, key); err != nil {
			return false, err
		}
	}
	return s.DestroyAllVersions(ctx, key)
}

// versionGone is an error saying the version (or the object) is not there,
// or is a delete marker.
func versionGone(err error) bool {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.ErrorCode() {
	case "NoSuchVersion", "NoSuchKey", "MethodNotAllowed":
		return true
	}
	return false
}

// VersionCount counts every version and delete marker of exactly key (0:
// nothing of the object is left); on a store without versions, 1 or 0.
func (s *Store) VersionCount(ctx context.Context, key string) (int, error) {
	if s.s3 == nil {
		ok, err := s.Exists(ctx, key)
		if ok {
			return 1, err
		}
		return 0, err
	}
	vs, ms, err := s.allVersions(ctx, key)
	return len(vs) + len(ms), err
}

// ListAllObjects is ListObjects over every key under prefix that has any
// version or delete marker, not only a current version: an object hidden
// behind a delete marker still holds its bytes. ModTime is the newest
// version's or marker's. Without versions (a local backend) it is
// ListObjects.
func (s *Store) ListAllObjects(ctx context.Context, prefix string) ([]Object, error) {
	var out []Object
	err := s.WalkAllObjects(ctx, prefix, func(page []Object) error {
		out = append(out, page...)
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, err
}

// WalkAllObjects is ListAllObjects handed to fn at most WalkPage keys at a
// time, in key order, each key once: the caller holds one page, however
// many objects the bucket holds (ADR-076).
func (s *Store) WalkAllObjects(ctx context.Context, prefix string, fn func([]Object) error) error {
	if s.s3 == nil {
		return s.WalkObjects(ctx, prefix, fn)
	}
	// A listing page ends inside a key's versions at most for its last key:
	// that key is held back and merged with the next page's.
	var carry *Object
	var keyMarker, versionMarker *string
	for {
		lctx, cancel := s.bound(ctx)
		out, err := s.s3.ListObjectVersions(lctx, &s3.ListObjectVersionsInput{Bucket: aws.String(s.identity.Bucket), Prefix: aws.String(prefix),
			KeyMarker: keyMarker, VersionIdMarker: versionMarker})
		if err != nil {
			err = timedOut(lctx, err)
			cancel()
			if keyMarker == nil && ctx.Err() == nil {
				return s.WalkObjects(ctx, prefix, fn) // a store without version listing: its current objects are all there is
			}
			return fmt.Errorf("store: list versions under %s: %w", prefix, err)
		}
		cancel()
		page := newestOfPage(out, carry)
		last := !aws.ToBool(out.IsTruncated) || (out.NextKeyMarker == nil && out.NextVersionIdMarker == nil)
		carry = nil
		if !last && len(page) > 0 {
			carry, page = &page[len(page)-1], page[:len(page)-1]
		}
		for len(page) > 0 {
			n := min(len(page), WalkPage)
			if err := fn(page[:n]); err != nil {
				return err
			}
			page = page[n:]
		}
		if last {
			return nil
		}
		keyMarker, versionMarker = out.NextKeyMarker, out.NextVersionIdMarker
	}
}

// newestOfPage is one version listing page's keys, sorted, each with its
// newest version's or marker's time, merged with carry (the previous
// page's last key).
func newestOfPage(out *s3.ListObjectVersionsOutput, carry *Object) []Object {
	newest := map[string]time.Time{}
	if carry != nil {
		newest[carry.Key] = carry.ModTime
	}
	note := func(key *string, at *time.Time) {
		k := aws.ToString(key)
		if t, seen := newest[k]; !seen || aws.ToTime(at).After(t) {
			newest[k] = aws.ToTime(at)
		}
	}
	for _, v := range out.Versions {
		note(v.Key, v.LastModified)
	}
	for _, m := range out.DeleteMarkers {
		note(m.Key, m.LastModified)
	}
	objs := make([]Object, 0, len(newest))
	for k, t := range newest {
		objs = append(objs, Object{Key: k, ModTime: t})
	}
	sort.Slice(objs, func(i, j int) bool { return objs[i].Key < objs[j].Key })
	return objs
}

// GetFirstVersion reads the oldest version of key: for an object written
// create-only, the bytes first written, whatever was written over them or
// a delete marker hides (ErrNotFound when it has no version). Without
// versions it is Get.
func (s *Store) GetFirstVersion(ctx context.Context, key string) ([]byte, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	if s.s3 == nil {
		return s.Get(ctx, key)
	}
	versions, _, err := s.allVersions(ctx, key)
	if err != nil {
		return nil, err
	}
	if len(versions) == 0 {
		return nil, fmt.Errorf("store: %s: %w", key, ErrNotFound)
	}
	first := versions[0] // a listing is newest first: among equal times, the last listed is the oldest
	for _, v := range versions[1:] {
		if !aws.ToTime(v.LastModified).After(aws.ToTime(first.LastModified)) {
			first = v
		}
	}
	return s.getVersion(ctx, key, aws.ToString(first.VersionId))
}
