package settings_test

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/craig/retention/kernel/settings"
)

// secretish is a value the fuzzer puts in the admin token: long enough that
// finding it in an error means it leaked.
var secretish = regexp.MustCompile(`^[A-Za-z0-9]{12,64}$`)

// FuzzLoad: any YAML file and environment either load into settings that
// pass their own validation or fail with ErrInvalid (or a read/parse error)
// — never a panic — and the admin token's value never appears in the
// error.
func FuzzLoad(f *testing.F) {
	f.Add("event_outbox_retention_days: 30\nevent_inbox_retention_days: 31\n", "CRAIG_FUZZ__PRUNE_BATCH_SIZE=5000", "s3cr3tT0kenValue0123")
	f.Add("event_outbox_retention_days: 030\n", "CRAIG_FUZZ__ADMIN_TOKEN=short", "s3cr3tT0kenValue0123")
	f.Add("events: {signing_key_file: [1, 2]}\n---\nx: 1\n", "CRAIG_FUZZ__HTTP_ADDR=0.0.0.0:80", "s3cr3tT0kenValue0123")
	f.Add("prune_statement_timeout: 30000000\n", "CRAIG_FUZZ__REPLAY_MAX_AGE_DAYS=0x1e", "AAAAAAAAAAAAAAAAAAAA")
	f.Add("", "CRAIG_FUZZ__AUTH__JWT_HS256_SECRET=abc", "zzzzzzzzzzzzzzzzzzzz")
	f.Fuzz(func(t *testing.T, yaml, env, token string) {
		path := filepath.Join(t.TempDir(), "fuzz.yaml")
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		environ := strings.Split(env, "\n")
		if secretish.MatchString(token) {
			environ = append(environ, "CRAIG_FUZZ__ADMIN_TOKEN="+token)
		}
		cfg, err := settings.Load("fuzz", settings.DefaultTransport("postgres://postgres@127.0.0.1:5432/fuzz"), settings.Source{ConfigPath: path, Environ: environ})
		if err != nil {
			if secretish.MatchString(token) && strings.Contains(err.Error(), token) &&
				!strings.Contains(strings.ToLower(yaml+env), strings.ToLower(token)) { // a key is named folded to lower case
				t.Fatalf("the admin token leaked into the error: %v", err)
			}
			var se *settings.Error
			if errors.As(err, &se) && !errors.Is(err, settings.ErrInvalid) {
				t.Fatalf("a settings error that is not ErrInvalid: %v", err)
			}
			return
		}
		if ps := cfg.Problems(); len(ps) > 0 {
			t.Fatalf("loaded settings that fail their own validation: %+v", ps)
		}
	})
}
