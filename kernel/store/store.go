// Package store is the archive object store: an S3-compatible bucket (or, for
// unit tests only, a local directory or memory) opened from a gocloud.dev/blob
// bucket URL, hardened for archives that must never be overwritten.
//
// Bucket URLs:
//
//	s3://craig-archive?endpoint=http://127.0.0.1:7070&region=us-east-1&use_path_style=true&disable_https=true
//	file:///abs/dir    (fileblob: unit tests only; IfNotExist is racy)
//	mem://             (memblob: unit tests only; a fresh empty bucket per Open)
//
// The s3 query options are those of gocloud.dev/blob/s3blob v0.47
// (use_path_style, disable_https, accelerate, ssetype, kmskeyid) and of
// gocloud.dev/aws.V2ConfigFromURLParams (endpoint, region, profile,
// hostname_immutable, dualstack, fips, anonymous, role, rate_limiter_capacity,
// request_checksum_calculation, response_checksum_validation); an unknown
// option fails Open. Credentials come from the AWS SDK's default chain:
// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY first, then the shared config
// files.
//
// Only the s3, file and mem drivers are linked in (blank imports below); any
// other scheme is refused with ErrUnsupportedBackend.
package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// (unit tests only)
	_ "gocloud.dev/blob/memblob"  // mem:// (unit tests only)
	_ "gocloud.dev/blob/s3blob"   // s3:// (the real store)
	"gocloud.dev/gcerrors"
)

// Sentinel errors; every error the package returns wraps at most one of them
// (errors.Is) next to the driver's own error.
var (
	// ErrAlreadyExists: PutCreate found the key taken (S3 412 Precondition
	// Failed on If-None-Match: *); the existing object is untouched.
	ErrAlreadyExists = errors.New("store: object already exists")
	// ErrConflict: PutCreate met another write to the same key in progress
	// (S3 409: AWS answers ConditionalRequestConflict to concurrent
	// conditional writes, versitygw's posix backend
	// ExistingObjectIsDirectory while another request creates or removes
	// the key). Nothing was written; the caller may retry.
	ErrConflict = errors.New("store: conflicting write in progress")
	// ErrBadDigest: PutCreateSHA256 got a digest that is not a SHA-256.
	ErrBadDigest = errors.New("store: bad digest")
	// ErrNotFound: Get of a key that holds no object.
	ErrNotFound = errors.New("store: object not found")
	// ErrInvalidKey: a key outside Prefix or not a clean slash-separated path,
	// or a key segment (service, table, archive id) that fails validation.
	ErrInvalidKey = errors.New("store: invalid key")
	// ErrTooLarge: an object larger than MaxObjectBytes.
	ErrTooLarge = errors.New("store: object too large")
	// ErrUnsupportedBackend: a bucket URL whose scheme is not s3, file or mem.
	ErrUnsupportedBackend = errors.New("store: unsupported backend")
	// ErrBadURL: a bucket URL that cannot be parsed or lacks its bucket.
	ErrBadURL = errors.New("store: bad bucket URL")
)

// Bucket URL schemes the package opens.
const (
	SchemeS3   = "s3"
	SchemeFile = "file"
	SchemeMem  = "mem"
)

// Content types of the archive objects.
const (
	ContentTypeNDJSON = "application/x-ndjson"
	ContentTypeJSON   = "application/json"
	// defaultContentType is used when PutCreate gets none: gocloud would
	// otherwise sniff the bytes, and the stored type would depend on them.
	defaultContentType = "application/octet-stream"
)

// maxObjectBytes is the largest object PutCreate accepts and Get returns:
// 5 GiB, S3's limit for a single PutObject. The archiver's batches are far
// smaller (max_batch_bytes defaults to 32 MiB and is validated against this
// cap), and every backend shares the cap so that a configuration valid on a
// test backend is valid on the real one.
const maxObjectBytes int64 = 5 << 30

// DefaultRequestTimeout bounds every store request (a put, a get, a delete,
// each with its retries) unless Open is given another: a 32 MiB put takes
// well under a second on a healthy store, and a store that accepts
// connections and never answers must fail the pass, not hold its lease.
const DefaultRequestTimeout = 60 * time.Second

// ErrTimeout: a store request did not finish within the request timeout
// (the store accepted the connection and did not answer in time).
var ErrTimeout = errors.New("store: request timed out")

// Option configures Open.
type Option func(*Store)

// WithRequestTimeout bounds every request of the store (d > 0).
func WithRequestTimeout(d time.Duration) Option {
	return func(s *Store) {
		if d > 0 {
			s.timeout = d
		}
	}
}

// awsDefaultRegion is assumed for Identity when neither the URL nor the AWS
// configuration names a region (the SDK's own fallback for S3).
const awsDefaultRegion = "us-east-1"

// Identity names where the objects live; the archiver records it in every
// manifest and ledger row so an archive can be found again.
type Identity struct {
	// Endpoint is the s3 `endpoint` option as given, the AWS regional
	// endpoint (https://s3.<region>.amazonaws.com) when absent, or
	// "file://<abs dir>" / "mem://" for the local backends.
	Endpoint string
	// Bucket is the bucket name (s3), the directory's base name (file) or
	// the URL host, usually empty (mem).
	Bucket string
}

// Store is one opened bucket. It is safe for concurrent use.
type Store struct {
	// s3 is the bucket's S3 client (nil for the local backends): PutCreate
	// sends its PutObject itself.
	s3       *s3.Client
	bucket   *blob.Bucket
	scheme   string
	identity Identity
	// timeout bounds each request (DefaultRequestTimeout unless set).
	timeout time.Duration
	// versioning caches whether the bucket keeps versions (versioned).
	versioning struct {
		once sync.Once
		on   bool
		err  error
	}
}

// bound returns ctx limited to the request timeout, and a function turning
// a deadline the bound caused into ErrTimeout naming the operation.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, s.timeout, fmt.Errorf("%w after %v (endpoint %s)", ErrTimeout, s.timeout, s.identity.Endpoint))
}

// timedOut wraps err with the bound's cause when the request timeout ended
// it, so callers can tell a hung store (ErrTimeout) from a refusal.
func timedOut(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if cause := context.Cause(ctx); cause != nil && errors.Is(cause, ErrTimeout) {
		return fmt.Errorf("%w: %w", cause, err)
	}
	return err
}

// Open opens the bucket a URL names (see the package comment for the forms).
// It does not touch the network: the archiver's boot probe is what
// proves the bucket is reachable and writable.
func Open(ctx context.Context, bucketURL string, opts ...Option) (*Store, error) {
	u, err := url.Parse(bucketURL)
	if err != nil {
		return nil, fmt.Errorf("%w: the URL does not parse", ErrBadURL) // the parse error would echo it
	}
	if err := CheckURL(bucketURL); err != nil {
		return nil, err
	}
	var id Identity
	switch u.Scheme {
	case SchemeS3:
		if u.Host == "" {
			return nil, fmt.Errorf("%w: %q names no bucket (want s3://<bucket>?…)", ErrBadURL, redactURL(u))
		}
		id = Identity{Endpoint: u.Query().Get("endpoint"), Bucket: u.Host}
	case SchemeFile:
		dir, err := fileDir(u)
		if err != nil {
			return nil, err
		}
		id = Identity{Endpoint: "file://" + filepath.ToSlash(dir), Bucket: filepath.Base(dir)}
	case SchemeMem:
		id = Identity{Endpoint: "mem://" + u.Host, Bucket: u.Host}
	default:
		return nil, fmt.Errorf("%w: scheme %q (want %s, %s or %s)", ErrUnsupportedBackend, u.Scheme, SchemeS3, SchemeFile, SchemeMem)
	}
	b, err := blob.OpenBucket(ctx, bucketURL)
	if err != nil {
		// gocloud's error quotes the URL and an unknown option's value:
		// name the options instead.
		return nil, fmt.Errorf("%w: %s: the driver refused it (options given: %s; see the package documentation for the accepted ones)",
			ErrBadURL, redactURL(u), strings.Join(optionNames(u), ", "))
	}
	if u.Scheme == SchemeS3 && id.Endpoint == "" {
		id.Endpoint = awsEndpoint(b)
	}
	st := &Store{bucket: b, scheme: u.Scheme, identity: id, timeout: DefaultRequestTimeout}
	for _, o := range opts {
		o(st)
	}
	if u.Scheme == SchemeS3 {
		var client *s3.Client
		if !b.As(&client) {
			_ = b.Close()
			return nil, fmt.Errorf("store: open %s: the s3 driver exposes no S3 client", redactURL(u))
		}
		st.s3 = client
	}
	return st, nil
}

// fileDir is the directory a file:// URL names, made absolute, read the way
// fileblob reads it (host "." marks a relative path).
func fileDir(u *url.URL) (string, error) {
	p := u.Path
	if u.Host == "." {
		p = strings.TrimPrefix(p, "/")
	}
	if p == "" {
		return "", fmt.Errorf("%w: %q names no directory (want file:///abs/dir)", ErrBadURL, u.String())
	}
	abs, err := filepath.Abs(filepath.FromSlash(p))
	if err != nil {
		return "", fmt.Errorf("%w: %q: %w", ErrBadURL, u.String(), err)
	}
	return abs, nil
}

// awsEndpoint is the regional AWS endpoint the S3 client of b resolves to
// when the URL sets no endpoint.
func awsEndpoint(b *blob.Bucket) string {
	region := awsDefaultRegion
	var client *s3.Client
	if b.As(&client) && client.Options().Region != "" {
		region = client.Options().Region
	}
	return "https://s3." + region + ".amazonaws.com"
}

// redactURL shows a bucket URL without its query values (an option's value
// may be a secret) and without userinfo.
func redactURL(u *url.URL) string {
	c := *u
	c.User = nil
	if c.RawQuery != "" {
		c.RawQuery = ""
		return c.String() + "?" + strings.Join(optionNames(u), "&")
	}
	return c.String()
}

// optionNames lists the query option names of a bucket URL, sorted.
func optionNames(u *url.URL) []string {
	q := u.Query()
	names := make([]string, 0, len(q))
	for k := range q {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// CheckURL refuses a bucket URL or an endpoint option carrying userinfo
// (s3://user:secret@bucket, endpoint=http://user:secret@host): credentials
// come from the AWS SDK's chain, never the URL, because the endpoint is
// copied into manifests, ledger rows, events and probe output. The error
// never repeats the credentials.
func CheckURL(bucketURL string) error {
	u, err := url.Parse(bucketURL)
	if err != nil {
		return fmt.Errorf("%w: the URL does not parse", ErrBadURL)
	}
	if u.User != nil {
		return fmt.Errorf("%w: the bucket URL carries user info (user:password@); give credentials with AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY instead", ErrBadURL)
	}
	if u.Query().Has("prefix") {
		// gocloud would prefix the keys its own calls use, not those the
		// versioned calls (VersionCount, DestroyAllVersions) make with the
		// S3 client: a destroyed archive could then be read while the
		// versions said none were left. Archives live under their own
		// prefix already.
		return fmt.Errorf("%w: the bucket URL has a prefix option; name the bucket alone (archives are kept under %s<service>/)", ErrBadURL, Prefix)
	}
	if ep := u.Query().Get("endpoint"); ep != "" {
		e, err := url.Parse(ep)
		if err != nil {
			return fmt.Errorf("%w: the endpoint option does not parse", ErrBadURL)
		}
		if e.User != nil {
			return fmt.Errorf("%w: the endpoint option carries user info (user:password@); give credentials with AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY instead", ErrBadURL)
		}
	}
	return nil
}

// Identity returns the store's endpoint and bucket.
func (s *Store) Identity() Identity { return s.identity }

// IsLocalBackend reports whether the store is a local directory or memory:
// fit for unit tests only (fileblob's IfNotExist is not safe under concurrent
// writers, memblob is not durable). The archiver refuses such a store.
func (s *Store) IsLocalBackend() bool { return s.scheme == SchemeFile || s.scheme == SchemeMem }

// MaxObjectBytes is the largest object the store accepts: 5 GiB (see
// maxObjectBytes).
func (s *Store) MaxObjectBytes() int64 { return maxObjectBytes }

// PutCreate writes data under key only if no object exists there: a
// conditional put (blob IfNotExist, S3 If-None-Match: *). When the key is
// taken it returns an error wrapping ErrAlreadyExists and leaves the existing
// object untouched. Of several concurrent PutCreate calls on one key exactly
// one succeeds on S3 (not on the file backend).
//
// The AWS SDK retries a request that failed in transit; when the lost attempt
// had in fact stored the object, the retry reports ErrAlreadyExists for the
// caller's own write. A caller that writes each key once (the archiver's keys
// carry a fresh UUIDv7) can tell by comparing Get's bytes with its own.
func (s *Store) PutCreate(ctx context.Context, key string, data []byte, contentType string) error {
	return s.putCreate(ctx, key, bytes.NewReader(data), int64(len(data)), contentType, "")
}

// PutCreateSHA256 is PutCreate for a caller that has the data's SHA-256
// already (the archiver's manifest records it): on S3 the request is signed
// with that digest (x-amz-content-sha256, over HTTP and HTTPS alike) instead
// of the SDK hashing the data a second time over HTTP or sending it unsigned
// over HTTPS. The server checks the signed digest against what it received:
// a wrong one stores nothing. The local backends ignore it. sha256Hex must be
// 64 lower-case hex digits.
func (s *Store) PutCreateSHA256(ctx context.Context, key string, data []byte, contentType, sha256Hex string) error {
	if !isSHA256Hex(sha256Hex) {
		return fmt.Errorf("store: put %s: %w: %q is not a lower-case hex SHA-256", key, ErrBadDigest, sha256Hex)
	}
	return s.putCreate(ctx, key, bytes.NewReader(data), int64(len(data)), contentType, sha256Hex)
}

// PutCreateReaderSHA256 is PutCreateSHA256 for data the caller streams:
// body holds exactly size bytes whose SHA-256 is sha256Hex (it is rewound to
// retry a request). The archiver streams an NDJSON object from its rows'
// documents this way instead of copying them into one buffer.
func (s *Store) PutCreateReaderSHA256(ctx context.Context, key string, body io.ReadSeeker, size int64, contentType, sha256Hex string) error {
	if !isSHA256Hex(sha256Hex) {
		return fmt.Errorf("store: put %s: %w: %q is not a lower-case hex SHA-256", key, ErrBadDigest, sha256Hex)
	}
	if size < 0 {
		return fmt.Errorf("store: put %s: negative size %d", key, size)
	}
	return s.putCreate(ctx, key, body, size, contentType, sha256Hex)
}

func (s *Store) putCreate(ctx context.Context, key string, body io.ReadSeeker, size int64, contentType, sha256Hex string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if size > maxObjectBytes {
		return fmt.Errorf("store: put %s: %w: %d bytes > %d", key, ErrTooLarge, size, maxObjectBytes)
	}
	if contentType == "" {
		contentType = defaultContentType
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var err error
	if s.s3 != nil && size <= directPutMaxBytes && !strings.Contains(key, gocloudEscapeMarker) {
		err = s.putObject(ctx, key, body, size, contentType, sha256Hex)
	} else {
		// Upload hands the driver the whole reader in one call. s3blob (AWS
		// transfer manager) sends one PutObject up to 16 MiB and a
		// multipart upload above, with If-None-Match on
		// CompleteMultipartUpload.
		err = s.bucket.Upload(ctx, key, io.LimitReader(body, size), &blob.WriterOptions{ContentType: contentType, IfNotExist: true,
			BufferSize: uploadPartBytes, MaxConcurrency: uploadConcurrency})
	}
	// S3 answers a taken key 412 (code PreconditionFailed), which gocloud
	// maps to FailedPrecondition (verified against versitygw v1.8.0).
	switch {
	case err == nil:
		return nil
	case gcerrors.Code(err) == gcerrors.FailedPrecondition || httpStatus(err) == http.StatusPreconditionFailed:
		return fmt.Errorf("store: put %s: %w: %w", key, ErrAlreadyExists, err)
	case httpStatus(err) == http.StatusConflict:
		return fmt.Errorf("store: put %s: %w: %w", key, ErrConflict, err)
	default:
		return fmt.Errorf("store: put %s: %w", key, timedOut(ctx, err))
	}
}

// directPutMaxBytes is the largest object PutCreate sends as its own single
// PutObject (a typical archive batch is 1 to 5 MiB). Against versitygw
// v1.8.0, a create-only PUT of 8 MiB or more on a taken key was sometimes
// answered by a reset connection instead of 412 (the server refuses before
// it has read the body), 5 MiB and below never in the bench's trials; larger
// objects take gocloud's writer, a multipart upload from 16 MiB whose
// CompleteMultipartUpload carries the condition instead.
const directPutMaxBytes = 5 << 20

// Parts of a multipart upload (objects above directPutMaxBytes): the
// transfer manager buffers Concurrency parts of PartSize each, by default
// 5 × 8 MiB = 40 MiB beside the object itself. The archiver bounds its
// memory by max_batch_bytes, so the upload buffers 2 × 5 MiB (S3's smallest
// part) instead; the data is in memory already, so more parallel parts buy
// little on one link.
const (
	uploadPartBytes   = 5 << 20
	uploadConcurrency = 2
)

// gocloudEscapeMarker starts gocloud's escape sequences in S3 keys: a key
// holding it would be stored differently by gocloud's writer than by a
// direct PutObject, so such a key (never one of the archiver's) takes
// gocloud's path. Every other valid key (ValidateKey) is stored as is by
// both.
const gocloudEscapeMarker = "__0x"

// putObject stores data with one S3 PutObject request of known length: no
// transfer-manager buffering (the data is in memory already), and the
// payload signed with sha256Hex when the caller has it.
func (s *Store) putObject(ctx context.Context, key string, body io.ReadSeeker, size int64, contentType, sha256Hex string) error {
	in := &s3.PutObjectInput{
		Bucket:        aws.String(s.identity.Bucket),
		Key:           aws.String(key),
		Body:          body,
		ContentLength: aws.Int64(size),
		ContentType:   aws.String(contentType),
		IfNoneMatch:   aws.String("*"),
	}
	var opts []func(*s3.Options)
	if sha256Hex != "" {
		opts = append(opts, func(o *s3.Options) {
			o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
				return st.Finalize.Add(middleware.FinalizeMiddlewareFunc("CraigKnownPayloadHash",
					func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
						return next.HandleFinalize(v4.SetPayloadHash(ctx, sha256Hex), in)
					}), middleware.Before)
			})
		})
	}
	_, err := s.s3.PutObject(ctx, in, opts...)
	return err
}

func isSHA256Hex(v string) bool {
	if len(v) != 64 {
		return false
	}
	for _, c := range v {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// httpStatus is the HTTP status of the S3 response behind err, or 0.
func httpStatus(err error) int {
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// Get returns the bytes stored under key, or an error wrapping ErrNotFound.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	r, err := s.bucket.NewReader(ctx, key, nil)
	if err != nil {
		// In a versioned bucket, a GET racing a delete of the version it
		// resolved answers 404 NoSuchVersion: the object is gone all the same.
		if gcerrors.Code(err) == gcerrors.NotFound || httpStatus(err) == http.StatusNotFound {
			return nil, fmt.Errorf("store: get %s: %w: %w", key, ErrNotFound, err)
		}
		return nil, fmt.Errorf("store: get %s: %w", key, timedOut(ctx, err))
	}
	defer func() { _ = r.Close() }()
	if size := r.Size(); size > maxObjectBytes {
		return nil, fmt.Errorf("store: get %s: %w: %d bytes > %d", key, ErrTooLarge, size, maxObjectBytes)
	}
	buf := bytes.NewBuffer(make([]byte, 0, max(r.Size(), 0)))
	// The limit guards against an object that grew past its announced size.
	if _, err := io.Copy(buf, io.LimitReader(r, maxObjectBytes+1)); err != nil {
		if ctx.Err() != nil { // our bound or the caller's: a timeout, not damage
			return nil, fmt.Errorf("store: get %s: read: %w", key, timedOut(ctx, err))
		}
		// The store answered, then could not give the object's bytes
		// whole (a file damaged on its disk, a connection cut mid-body).
		return nil, fmt.Errorf("store: get %s: read: %w: %w", key, ErrUnreadable, err)
	}
	if int64(buf.Len()) > maxObjectBytes {
		return nil, fmt.Errorf("store: get %s: %w: more than %d bytes", key, ErrTooLarge, maxObjectBytes)
	}
	return buf.Bytes(), nil
}

// DeleteIfExists deletes the object under key. A missing key is not an
// error: it returns (false, nil). On S3, deleted is learnt from a HEAD before
// the DELETE, so two concurrent deletes of one key may both report true.
func (s *Store) DeleteIfExists(ctx context.Context, key string) (deleted bool, err error) {
	if err := ValidateKey(key); err != nil {
		return false, err
	}
	versioned, err := s.versioned(ctx)
	if err != nil {
		return false, err
	}
	if versioned {
		return s.DestroyAllVersions(ctx, key)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	err = s.bucket.Delete(ctx, key)
	switch {
	case err == nil:
		return true, nil
	case gcerrors.Code(err) == gcerrors.NotFound:
		return false, nil
	default:
		return false, fmt.Errorf("store: delete %s: %w", key, timedOut(ctx, err))
	}
}

// Close releases the bucket.
func (s *Store) Close() error {
	if err := s.bucket.Close(); err != nil {
		return fmt.Errorf("store: close: %w", err)
	}
	return nil
}

// List returns the keys under prefix (a directory-like prefix ending in
// "/"), sorted, at most max of them (0: all).
func (s *Store) List(ctx context.Context, prefix string, max int) ([]string, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	it := s.bucket.List(&blob.ListOptions{Prefix: prefix})
	var keys []string
	for max == 0 || len(keys) < max {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return keys, fmt.Errorf("store: list %s: %w", prefix, timedOut(ctx, err))
		}
		keys = append(keys, obj.Key)
	}
	sort.Strings(keys)
	return keys, nil
}

// Exists reports whether an object is stored under key (a HEAD).
func (s *Store) Exists(ctx context.Context, key string) (bool, error) {
	if err := ValidateKey(key); err != nil {
		return false, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	ok, err := s.bucket.Exists(ctx, key)
	if err != nil {
		return false, fmt.Errorf("store: exists %s: %w", key, timedOut(ctx, err))
	}
	return ok, nil
}

// Object is a listed object's key and modification time.
type Object struct {
	Key     string
	ModTime time.Time
}

// WalkPage is how many objects a walk hands over at a time.
const WalkPage = 1000

// WalkObjects lists the current objects under prefix and hands them to fn
// WalkPage at a time, in key order: the caller holds one page, however
// many objects the bucket holds. Each page's listing call is bounded on its
// own. An error of fn ends the walk and is returned.
func (s *Store) WalkObjects(ctx context.Context, prefix string, fn func([]Object) error) error {
	it := s.bucket.List(&blob.ListOptions{Prefix: prefix})
	page := make([]Object, 0, WalkPage)
	for {
		lctx, cancel := s.bound(ctx)
		obj, err := it.Next(lctx)
		if err != nil {
			err = timedOut(lctx, err)
		}
		cancel()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("store: list %s: %w", prefix, err)
		}
		if page = append(page, Object{Key: obj.Key, ModTime: obj.ModTime}); len(page) == WalkPage {
			if err := fn(page); err != nil {
				return err
			}
			page = page[:0]
		}
	}
	if len(page) > 0 {
		return fn(page)
	}
	return nil
}

// ListObjects is List with each object's modification time.
func (s *Store) ListObjects(ctx context.Context, prefix string) ([]Object, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	it := s.bucket.List(&blob.ListOptions{Prefix: prefix})
	var out []Object
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return out, fmt.Errorf("store: list %s: %w", prefix, timedOut(ctx, err))
		}
		out = append(out, Object{Key: obj.Key, ModTime: obj.ModTime})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}
