package store

import (
	"context"
	"errors"
	"fmt"
	"net/http"

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

// DestroyAllVersions deletes every version and delete marker of key, so
// nothing of the object is left in a versioned bucket; false when it had
// none. A version under a legal hold fails the call with ErrLocked (the
// versions deleted before it stay deleted).
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
	var ids []*string
	existed := len(versions) > 0
	for _, v := range versions {
		ids = append(ids, v.VersionId)
	}
	for _, m := range markers {
		ids = append(ids, m.VersionId)
	}
	for _, id := range ids {
		dctx, cancel := s.bound(ctx) // each delete its own bound: an object may have thousands of versions
		_, err := s.s3.DeleteObject(dctx, &s3.DeleteObjectInput{Bucket: aws.String(s.identity.Bucket), Key: aws.String(key), VersionId: id})
		err = timedOut(dctx, err)
		cancel()
		var ae smithy.APIError
		if errors.As(err, &ae) && ae.ErrorCode() == "AccessDenied" {
			return false, fmt.Errorf("store: destroy %s: %w: %w", key, ErrLocked, err)
		}
		if httpStatus(err) == http.StatusNotFound {
			continue // a concurrent delete took this version first
		}
		if err != nil {
			return false, fmt.Errorf("store: destroy %s version %s: %w", key, aws.ToString(id), err)
		}
	}
	return existed, s.checkDestroyed(ctx, key, ids)
}

// checkDestroyed re-checks a destroy: none of the versions it deleted is
// left (a version written meanwhile by somebody else is not its own).
func (s *Store) checkDestroyed(ctx context.Context, key string, ids []*string) error {
	left, markers, err := s.allVersions(ctx, key)
	if err != nil {
		return err
	}
	deleted := make(map[string]bool, len(ids))
	for _, id := range ids {
		deleted[aws.ToString(id)] = true
	}
	still := 0
	for _, v := range left {
		if deleted[aws.ToString(v.VersionId)] {
			still++
		}
	}
	for _, m := range markers {
		if deleted[aws.ToString(m.VersionId)] {
			still++
		}
	}
	if still > 0 {
		return fmt.Errorf("store: destroy %s: %d version(s) or marker(s) still there after their deletes", key, still)
	}
	return nil
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
