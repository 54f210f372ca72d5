package store

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// ErrLocked is wrapped by a delete the store refused because the object is
// under an S3 Object Lock legal hold.
var ErrLocked = errors.New("store: object is under a legal hold")

// ObjectLock reports whether the bucket has S3 Object Lock enabled (then it
// is versioned: a plain delete only adds a delete marker, and a legal hold
// on an object makes the store refuse to delete its versions). Local
// backends have none.
func (s *Store) ObjectLock(ctx context.Context) (bool, error) {
	if s.s3 == nil {
		return false, nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	out, err := s.s3.GetObjectLockConfiguration(ctx, &s3.GetObjectLockConfigurationInput{Bucket: aws.String(s.identity.Bucket)})
	var ae smithy.APIError
	switch {
	case errors.As(err, &ae) && (ae.ErrorCode() == "ObjectLockConfigurationNotFoundError" || ae.ErrorCode() == "NotImplemented"):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("store: object lock configuration: %w", timedOut(ctx, err))
	}
	return out.ObjectLockConfiguration != nil && out.ObjectLockConfiguration.ObjectLockEnabled == types.ObjectLockEnabledEnabled, nil
}

// SetLegalHold turns the Object Lock legal hold of the object's current
// version on or off (S3 only).
func (s *Store) SetLegalHold(ctx context.Context, key string, on bool) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if s.s3 == nil {
		return fmt.Errorf("store: legal hold %s: the %s backend has no object lock", key, s.scheme)
	}
	status := types.ObjectLockLegalHoldStatusOff
	if on {
		status = types.ObjectLockLegalHoldStatusOn
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	_, err := s.s3.PutObjectLegalHold(ctx, &s3.PutObjectLegalHoldInput{
		Bucket: aws.String(s.identity.Bucket), Key: aws.String(key), LegalHold: &types.ObjectLockLegalHold{Status: status},
	})
	var ae smithy.APIError
	switch {
	case errors.As(err, &ae) && (ae.ErrorCode() == "NoSuchKey" || ae.ErrorCode() == "NotFound"):
		return fmt.Errorf("store: legal hold %s %s: %w", status, key, ErrNotFound)
	case err != nil:
		return fmt.Errorf("store: legal hold %s %s: %w", status, key, timedOut(ctx, err))
	}
	return nil
}

// destroyPasses bounds the rounds of a destroy (delete the versions, list
// again). Concurrent destroyers of one key (replicas clearing their probe
// key together) race the store's promotion of an older version to current:
// versitygw answers 400 InvalidArgument for a version another delete took
// first, and a listing right after can still show a version deleted a
// moment before. A second pass settles both (8 replicas
// failed without it); the later ones are for a store slow to settle,
// each after a pause (destroyPassPause times the pass) that lets a listing
// catch up with deletes (a loaded machine saw a version listed 3 passes in
// a row, and under a full CI run 5 passes, 200 ms of pauses, every delete
// of it answered NoSuchVersion): 8 passes wait up to 560 ms in all.
const destroyPasses = 8

// destroyPassPause is the first pause between a destroy's passes.
const destroyPassPause = 20 * time.Millisecond

// DestroyAllVersions deletes every version and delete marker of key, so
// nothing of the object is left in a versioned bucket; false when it had
// none. A version under a legal hold fails the call with ErrLocked (the
// versions deleted before it stay deleted). It reports success only when a
// listing after its deletes shows none of them: a version whose delete was
// answered with an error the store gives a concurrent destroyer
// (InvalidArgument, NotFound) is deleted again in the next pass if it is
// still listed.
func (s *Store) DestroyAllVersions(ctx context.Context, key string) (bool, error) {
	if err := ValidateKey(key); err != nil {
		return false, err
	}
	if s.s3 == nil {
		return s.DeleteIfExists(ctx, key)
	}
	versions, markers, err := s.allVersions(ctx, key)
	if err != nil {
		return false, err
	}
	existed := len(versions) > 0
	ids := make([]string, 0, len(versions)+len(markers))
	for _, v := range versions {
		ids = append(ids, aws.ToString(v.VersionId))
	}
	for _, m := range markers {
		ids = append(ids, aws.ToString(m.VersionId))
	}
	pending := ids
	var raced error
	for pass := 1; ; pass++ {
		if raced, err = s.deleteVersions(ctx, key, pending); err != nil {
			return false, err
		}
		if pending, err = s.stillListed(ctx, key, ids); err != nil || len(pending) == 0 {
			return existed && err == nil, err
		}
		if pass < destroyPasses {
			select {
			case <-ctx.Done():
				return false, ctx.Err()
			case <-time.After(time.Duration(pass) * destroyPassPause):
			}
			if pending, err = s.stillListed(ctx, key, ids); err != nil || len(pending) == 0 {
				return existed && err == nil, err // settled while we paused
			}
		}
		if pass == destroyPasses {
			if raced != nil {
				return false, fmt.Errorf("store: destroy %s: %d version(s) or marker(s) still there after %d passes of deletes (last refusal: %w)", key, len(pending), destroyPasses, raced)
			}
			return false, fmt.Errorf("store: destroy %s: %d version(s) or marker(s) still there after %d passes of deletes", key, len(pending), destroyPasses)
		}
	}
}

// deleteVersions deletes each version id of key. A delete answered as a
// concurrent destroyer's is (NotFound; InvalidArgument, versitygw's answer
// for a version id another delete took first) is left to the listing that
// follows; the last such answer is returned as raced.
func (s *Store) deleteVersions(ctx context.Context, key string, ids []string) (raced, err error) {
	for _, id := range ids {
		dctx, cancel := s.bound(ctx) // each delete its own bound: an object may have thousands of versions
		_, err := s.s3.DeleteObject(dctx, &s3.DeleteObjectInput{Bucket: aws.String(s.identity.Bucket), Key: aws.String(key), VersionId: aws.String(id)})
		err = timedOut(dctx, err)
		cancel()
		var ae smithy.APIError
		switch {
		case err == nil:
		case errors.As(err, &ae) && ae.ErrorCode() == "AccessDenied":
			return nil, fmt.Errorf("store: destroy %s: %w: %w", key, ErrLocked, err)
		case httpStatus(err) == http.StatusNotFound, errors.As(err, &ae) && ae.ErrorCode() == "InvalidArgument":
			raced = err
		default:
			return nil, fmt.Errorf("store: destroy %s version %s: %w", key, id, err)
		}
	}
	return raced, nil
}

// stillListed is which of ids a listing of key still shows (a version
// written meanwhile by somebody else is not the destroy's own).
func (s *Store) stillListed(ctx context.Context, key string, ids []string) ([]string, error) {
	left, markers, err := s.allVersions(ctx, key)
	if err != nil {
		return nil, err
	}
	deleted := make(map[string]bool, len(ids))
	for _, id := range ids {
		deleted[id] = true
	}
	var still []string
	for _, v := range left {
		if id := aws.ToString(v.VersionId); deleted[id] {
			still = append(still, id)
		}
	}
	for _, m := range markers {
		if id := aws.ToString(m.VersionId); deleted[id] {
			still = append(still, id)
		}
	}
	return still, nil
}

// versioned reports (once, then cached) whether the bucket keeps versions:
// then a delete must remove every version, or the key stays taken for a
// create-only put (versitygw answers If-None-Match with 412 over a delete
// marker) and the data stays on disk.
func (s *Store) versioned(ctx context.Context) (bool, error) {
	if s.s3 == nil {
		return false, nil
	}
	s.versioning.once.Do(func() {
		vctx, cancel := s.bound(ctx)
		defer cancel()
		out, err := s.s3.GetBucketVersioning(vctx, &s3.GetBucketVersioningInput{Bucket: aws.String(s.identity.Bucket)})
		if err != nil {
			s.versioning.err = fmt.Errorf("store: bucket versioning: %w", timedOut(vctx, err))
			return
		}
		s.versioning.on = out.Status == types.BucketVersioningStatusEnabled || out.Status == types.BucketVersioningStatusSuspended
	})
	return s.versioning.on, s.versioning.err
}

// LegalHold reports whether the object's current version is under an
// Object Lock legal hold (S3 only; ErrNotFound when there is no current
// version).
func (s *Store) LegalHold(ctx context.Context, key string) (bool, error) {
	if err := ValidateKey(key); err != nil {
		return false, err
	}
	if s.s3 == nil {
		return false, fmt.Errorf("store: legal hold %s: the %s backend has no object lock", key, s.scheme)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	out, err := s.s3.GetObjectLegalHold(ctx, &s3.GetObjectLegalHoldInput{Bucket: aws.String(s.identity.Bucket), Key: aws.String(key)})
	var ae smithy.APIError
	switch {
	case errors.As(err, &ae) && (ae.ErrorCode() == "NoSuchKey" || ae.ErrorCode() == "NotFound" || ae.ErrorCode() == "MethodNotAllowed"):
		return false, fmt.Errorf("store: legal hold of %s: %w", key, ErrNotFound)
	case errors.As(err, &ae) && ae.ErrorCode() == "NoSuchObjectLockConfiguration":
		return false, nil // never set on this version
	case err != nil:
		return false, fmt.Errorf("store: legal hold of %s: %w", key, timedOut(ctx, err))
	}
	return out.LegalHold != nil && out.LegalHold.Status == types.ObjectLockLegalHoldStatusOn, nil
}
