package kerneltest

import (
	"context"
	"errors"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// bucketTimeout bounds a scratch bucket's creation and its cleanup.
const bucketTimeout = 2 * time.Minute

// S3Bucket returns the URL of a bucket of its own for the test, on the S3
// server S3URL names, with Object Lock (as the real bucket store:up makes),
// emptied (every version and delete marker, legal holds lifted) and removed
// when the test ends. A test that runs a service under its real name writes
// under retention-archives/<service>/: in the shared bucket that would mix
// its archives with every other checkout's (an operator's verify would call
// them orphans, gc could delete them), so such a test uses its own bucket.
func S3Bucket(t testing.TB) string {
	t.Helper()
	raw := S3URL(t)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("kerneltest: %v", err)
	}
	client := s3Client(u)
	name := "craig-t-" + randomHex(t, 8)
	ctx, cancel := context.WithTimeout(context.Background(), bucketTimeout)
	defer cancel()
	if _, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name), ObjectLockEnabledForBucket: aws.Bool(true)}); err != nil {
		t.Fatalf("kerneltest: create scratch bucket %s: %v", name, err)
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), bucketTimeout)
		defer ccancel()
		if err := removeBucket(cctx, client, name); err != nil {
			t.Errorf("kerneltest: remove scratch bucket %s: %v", name, err)
		}
	})
	u.Host = name
	return u.String()
}

// s3Client is an S3 client for the server of an s3blob URL, with the
// environment's credentials (S3URL sets the local versitygw's).
func s3Client(u *url.URL) *s3.Client {
	q := u.Query()
	region := q.Get("region")
	if region == "" {
		region = "us-east-1"
	}
	return s3.New(s3.Options{
		Region:       region,
		Credentials:  credentials.NewStaticCredentialsProvider(os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY"), ""),
		BaseEndpoint: optional(q.Get("endpoint")),
		UsePathStyle: q.Get("use_path_style") == "true",
	})
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return aws.String(s)
}

// removeBucket lifts every legal hold, deletes every version and delete
// marker, then the bucket.
func removeBucket(ctx context.Context, client *s3.Client, name string) error {
	var errs []error
	var keyMarker, versionMarker *string
	for {
		out, err := client.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: aws.String(name), KeyMarker: keyMarker, VersionIdMarker: versionMarker})
		if err != nil {
			return err
		}
		for _, v := range out.Versions {
			_, _ = client.PutObjectLegalHold(ctx, &s3.PutObjectLegalHoldInput{Bucket: aws.String(name), Key: v.Key, VersionId: v.VersionId,
				LegalHold: &types.ObjectLockLegalHold{Status: types.ObjectLockLegalHoldStatusOff}})
			if _, err := client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(name), Key: v.Key, VersionId: v.VersionId}); err != nil {
				errs = append(errs, err)
			}
		}
		for _, m := range out.DeleteMarkers {
			if _, err := client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(name), Key: m.Key, VersionId: m.VersionId}); err != nil {
				errs = append(errs, err)
			}
		}
		if !aws.ToBool(out.IsTruncated) {
			break
		}
		keyMarker, versionMarker = out.NextKeyMarker, out.NextVersionIdMarker
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	_, err := client.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(name)})
	return err
}
