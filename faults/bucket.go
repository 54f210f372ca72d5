package faults

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// bucketTimeout bounds creating or emptying and deleting a bucket.
const bucketTimeout = 2 * time.Minute

// Bucket is a bucket of one scenario's own on the S3 server (with
// versioning and Object Lock, as the store's deployment requires), so what
// it lists is only what its own processes wrote.
type Bucket struct {
	Name     string
	Endpoint string
	client   *s3.Client
}

// NewBucket creates a bucket named craig-faults-<random> on the S3 server
// at endpoint (http://host:port), with credentials from the environment.
func NewBucket(ctx context.Context, endpoint string) (*Bucket, error) {
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	b := &Bucket{Name: "craig-faults-" + hex.EncodeToString(suffix), Endpoint: endpoint}
	b.client = s3.New(s3.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY"), ""),
	})
	ctx, cancel := context.WithTimeout(ctx, bucketTimeout)
	defer cancel()
	if _, err := b.client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(b.Name), ObjectLockEnabledForBucket: aws.Bool(true)}); err != nil {
		return nil, fmt.Errorf("create bucket %s: %w", b.Name, err)
	}
	return b, nil
}

// URL is the bucket's store URL through endpoint (the server's, or a
// proxy's in front of it).
func (b *Bucket) URL(endpoint string) string {
	u, _ := url.Parse(endpoint)
	return "s3://" + b.Name + "?endpoint=http://" + u.Host + "&region=us-east-1&use_path_style=true&disable_https=true"
}

// Remove deletes every version of every object (legal holds released)
// and the bucket.
func (b *Bucket) Remove(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, bucketTimeout)
	defer cancel()
	var errs []error
	p := s3.NewListObjectVersionsPaginator(b.client, &s3.ListObjectVersionsInput{Bucket: aws.String(b.Name)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("list versions of %s: %w", b.Name, err)
		}
		for _, v := range page.Versions {
			errs = append(errs, b.deleteVersion(ctx, v.Key, v.VersionId))
		}
		for _, m := range page.DeleteMarkers {
			errs = append(errs, b.deleteVersion(ctx, m.Key, m.VersionId))
		}
	}
	if _, err := b.client.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(b.Name)}); err != nil {
		errs = append(errs, fmt.Errorf("delete bucket %s: %w", b.Name, err))
	}
	return errors.Join(errs...)
}

func (b *Bucket) deleteVersion(ctx context.Context, key, version *string) error {
	_, _ = b.client.PutObjectLegalHold(ctx, &s3.PutObjectLegalHoldInput{Bucket: aws.String(b.Name), Key: key, VersionId: version,
		LegalHold: &s3types.ObjectLockLegalHold{Status: s3types.ObjectLockLegalHoldStatusOff}})
	_, err := b.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(b.Name), Key: key, VersionId: version, BypassGovernanceRetention: aws.Bool(true)})
	if err != nil {
		return fmt.Errorf("delete %s@%s: %w", aws.ToString(key), aws.ToString(version), err)
	}
	return nil
}
