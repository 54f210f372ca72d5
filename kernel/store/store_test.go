package store_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/kernel/store/storetest"
)

// openURL opens bucketURL and closes the store when the test ends.
func openURL(t *testing.T, bucketURL string) *store.Store {
	t.Helper()
	s, err := store.Open(t.Context(), bucketURL)
	if err != nil {
		t.Fatalf("Open(%s): %v", bucketURL, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestConformanceFileblob(t *testing.T) {
	storetest.RunConformance(t, func(t *testing.T) *store.Store {
		s := openURL(t, "file://"+t.TempDir())
		if !s.IsLocalBackend() {
			t.Fatal("file:// store is not local")
		}
		return s
	}, storetest.SkipConcurrentCreate("fileblob checks for the key then renames a temp file into place; measured 4/200 rounds with several winners"))
}

func TestConformanceMemblob(t *testing.T) {
	storetest.RunConformance(t, func(t *testing.T) *store.Store {
		return openURL(t, "mem://")
	})
}

func TestOpenRefuses(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want error
	}{
		{"gs://bucket", store.ErrUnsupportedBackend},
		{"azblob://bucket", store.ErrUnsupportedBackend},
		{"/just/a/path", store.ErrUnsupportedBackend},
		{"s3://?region=us-east-1", store.ErrBadURL},
		{"file://", store.ErrBadURL},
		{"::not a url", store.ErrBadURL},
	} {
		if _, err := store.Open(t.Context(), tc.url); !errors.Is(err, tc.want) {
			t.Errorf("Open(%q): got %v, want %v", tc.url, err, tc.want)
		}
	}
	// An option s3blob does not know fails Open instead of being ignored.
	if _, err := store.Open(t.Context(), "s3://b?endpoint=http://127.0.0.1:1&region=us-east-1&use_path_styl=true"); err == nil {
		t.Error("Open with a misspelt s3 option: got nil error")
	}
}

func TestIdentity(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "id")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	dir := t.TempDir()
	for _, tc := range []struct {
		url   string
		want  store.Identity
		local bool
	}{
		{
			"s3://craig-archive?endpoint=http://127.0.0.1:7070&region=us-east-1&use_path_style=true&disable_https=true",
			store.Identity{Endpoint: "http://127.0.0.1:7070", Bucket: "craig-archive"}, false,
		},
		{"s3://archive-eu?region=eu-west-1", store.Identity{Endpoint: "https://s3.eu-west-1.amazonaws.com", Bucket: "archive-eu"}, false},
		{"file://" + dir, store.Identity{Endpoint: "file://" + dir, Bucket: dir[strings.LastIndex(dir, "/")+1:]}, true},
		{"mem://", store.Identity{Endpoint: "mem://"}, true},
	} {
		s := openURL(t, tc.url)
		if got := s.Identity(); got != tc.want {
			t.Errorf("Identity(%s) = %+v, want %+v", tc.url, got, tc.want)
		}
		if got := s.IsLocalBackend(); got != tc.local {
			t.Errorf("IsLocalBackend(%s) = %v, want %v", tc.url, got, tc.local)
		}
		if got := s.MaxObjectBytes(); got != 5<<30 {
			t.Errorf("MaxObjectBytes(%s) = %d, want 5 GiB", tc.url, got)
		}
	}
}

func TestNewArchiveKeys(t *testing.T) {
	at := time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)
	keys, err := store.NewArchiveKeys("rules", "rule_evaluations", at, "0193f1d2-7c4e-7a10-8e2b-5f6a7b8c9d0e")
	if err != nil {
		t.Fatal(err)
	}
	want := store.ArchiveKeys{
		Data:     "retention-archives/rules/rule_evaluations/2027/01/02/0193f1d2-7c4e-7a10-8e2b-5f6a7b8c9d0e.ndjson",
		Manifest: "retention-archives/rules/rule_evaluations/2027/01/02/0193f1d2-7c4e-7a10-8e2b-5f6a7b8c9d0e.manifest.json",
	}
	if keys != want {
		t.Fatalf("NewArchiveKeys = %+v, want %+v", keys, want)
	}
	for _, k := range []string{keys.Data, keys.Manifest} {
		if err := store.ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%s): %v", k, err)
		}
	}
	probe, err := store.ProbeKey("rules")
	if err != nil || probe != "retention-archives/rules/.probe" {
		t.Fatalf("ProbeKey = %q, %v", probe, err)
	}

	bad := []string{"", "Rules", "ru les", "rules/x", "rules.x", "..", "règles", strings.Repeat("a", 64)}
	for _, seg := range bad {
		if _, err := store.NewArchiveKeys(seg, "t", at, "id"); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("service %q: got %v, want ErrInvalidKey", seg, err)
		}
		if _, err := store.NewArchiveKeys("s", seg, at, "id"); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("table %q: got %v, want ErrInvalidKey", seg, err)
		}
		if _, err := store.NewArchiveKeys("s", "t", at, seg); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("archive id %q: got %v, want ErrInvalidKey", seg, err)
		}
		if _, err := store.ProbeKey(seg); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("probe service %q: got %v, want ErrInvalidKey", seg, err)
		}
	}
	if _, err := store.NewArchiveKeys("s", "t", time.Time{}, "id"); !errors.Is(err, store.ErrInvalidKey) {
		t.Errorf("zero time: got %v, want ErrInvalidKey", err)
	}
	if err := store.ValidateSegment("table", strings.Repeat("a", 63)); err != nil {
		t.Errorf("63-byte segment: %v", err)
	}
}

// TestNoKeyIsADirectoryOfAnother checks the layout rule over a sample of keys:
// no key, followed by "/", is the start of another key.
func TestNoKeyIsADirectoryOfAnother(t *testing.T) {
	var keys []string
	for _, service := range []string{"rules", "security", "rules-x"} {
		p, err := store.ProbeKey(service)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, p)
		for _, table := range []string{"audit_log", "rule_evaluations", "probe", "ndjson"} {
			for _, id := range []string{"a", "0193f1d2-7c4e-7a10-8e2b-5f6a7b8c9d0e", "manifest"} {
				for _, day := range []time.Time{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 31, 0, 0, 0, 0, time.UTC)} {
					k, err := store.NewArchiveKeys(service, table, day, id)
					if err != nil {
						t.Fatal(err)
					}
					keys = append(keys, k.Data, k.Manifest)
				}
			}
		}
	}
	for _, a := range keys {
		for _, b := range keys {
			if strings.HasPrefix(b, a+"/") {
				t.Fatalf("%s is a directory of %s", a, b)
			}
		}
	}
}
