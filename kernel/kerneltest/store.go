package kerneltest

import (
	"net"
	"net/url"
	"os"
	"sync"
	"testing"
)

// EnvS3URL names the S3 bucket URL the scratch suites archive to.
const EnvS3URL = "CRAIG_TEST_S3_URL"

// DefaultS3URL is the local versitygw `go tool mage store:up` starts, in the
// gocloud.dev/blob s3blob URL form kernel/store opens.
const DefaultS3URL = "s3://craig-archive?endpoint=http://127.0.0.1:7070&region=us-east-1&use_path_style=true&disable_https=true"

// Credentials of the local versitygw (store:up's root user); used when the
// environment names none.
const (
	DefaultS3AccessKeyID     = "craig"
	DefaultS3SecretAccessKey = "craigsecret"
)

// s3Credentials sets the AWS credential defaults once per test process.
var s3Credentials sync.Once

// S3URL returns the bucket URL of the S3 server for tests (CRAIG_TEST_S3_URL,
// default the local versitygw) after checking its endpoint accepts TCP
// connections; an unreachable server fails the test (Missing).
//
// The AWS SDK reads credentials from the environment, and the s3blob URL
// opener takes none of its own. So when neither AWS_ACCESS_KEY_ID nor
// AWS_SECRET_ACCESS_KEY is set, S3URL sets them, once for the whole test
// process, to the local versitygw's craig/craigsecret. It uses os.Setenv in a
// sync.Once rather than t.Setenv, which panics in parallel tests and would
// undo the setting when the first test ends.
func S3URL(t testing.TB) string {
	t.Helper()
	NeedsServer(t, "the S3 store")
	raw := os.Getenv(EnvS3URL)
	if raw == "" {
		raw = DefaultS3URL
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("kerneltest: %s=%q: %v", EnvS3URL, raw, err)
	}
	if u.Scheme != "s3" || u.Host == "" {
		t.Fatalf("kerneltest: %s=%q: want s3://<bucket>?endpoint=…", EnvS3URL, raw)
	}
	// Without an endpoint the URL names real AWS S3: nothing local to probe.
	if endpoint := u.Query().Get("endpoint"); endpoint != "" {
		e, err := url.Parse(endpoint)
		if err != nil || e.Hostname() == "" {
			t.Fatalf("kerneltest: %s=%q: endpoint %q is not a URL with a host", EnvS3URL, raw, endpoint)
		}
		host := e.Host
		if e.Port() == "" {
			port := "443"
			if e.Scheme == "http" {
				port = "80"
			}
			host = net.JoinHostPort(e.Hostname(), port)
		}
		conn, err := net.DialTimeout("tcp", host, probeTimeout)
		if err != nil {
			Missing(t, "S3 server at "+host, "set "+EnvS3URL+" or start it with `go tool mage store:up`", err)
		}
		_ = conn.Close()
	}
	s3Credentials.Do(func() {
		if os.Getenv("AWS_ACCESS_KEY_ID") == "" && os.Getenv("AWS_SECRET_ACCESS_KEY") == "" {
			_ = os.Setenv("AWS_ACCESS_KEY_ID", DefaultS3AccessKeyID)
			_ = os.Setenv("AWS_SECRET_ACCESS_KEY", DefaultS3SecretAccessKey)
		}
	})
	if raw == DefaultS3URL && os.Getenv("AWS_ACCESS_KEY_ID") != DefaultS3AccessKeyID {
		t.Logf("kerneltest: AWS_ACCESS_KEY_ID is set to another key than the local versitygw's %q; unset it if requests are refused", DefaultS3AccessKeyID)
	}
	return raw
}
