//go:build faults

package faults_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/faults"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/kernel/subject"
	"github.com/craig/retention/services/rules"
)

// EnvRounds scales every matrix (CRAIG_FAULTS_ROUNDS runs per failpoint
// and fault kind; default DefaultRounds): raise it for a soak.
const (
	EnvRounds     = "CRAIG_FAULTS_ROUNDS"
	DefaultRounds = 20
	// EnvReport names a file each scenario appends its counts to (JSON
	// lines), which `go tool mage test:faults` prints.
	EnvReport = "CRAIG_FAULTS_REPORT"
)

func rounds(t *testing.T) int {
	t.Helper()
	v := os.Getenv(EnvRounds)
	if v == "" {
		return DefaultRounds
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, EnvRounds)
	require.Positive(t, n, EnvRounds)
	return n
}

// tally is one scenario's counts for the report.
type tally struct {
	Scenario  string         `json:"scenario"`
	Case      string         `json:"case"`
	Rounds    int            `json:"rounds"`
	Faults    map[string]int `json:"faults"`
	Checks    int            `json:"checks"`
	Orphans   int            `json:"orphans"`
	Defects   int            `json:"violations"`
	startedAt time.Time
}

func newTally(scenario, c string) *tally {
	return &tally{Scenario: scenario, Case: c, Faults: map[string]int{}, startedAt: time.Now()}
}

var reportMu sync.Mutex

// write appends the tally to the report file (when one is named).
func (tl *tally) write(t *testing.T) {
	t.Helper()
	t.Logf("%s/%s: %d rounds, faults %v, %d invariant checks, %d orphans, %d violations in %s",
		tl.Scenario, tl.Case, tl.Rounds, tl.Faults, tl.Checks, tl.Orphans, tl.Defects, time.Since(tl.startedAt).Round(time.Millisecond))
	path := os.Getenv(EnvReport)
	if path == "" {
		return
	}
	b, err := json.Marshal(tl)
	require.NoError(t, err)
	reportMu.Lock()
	defer reportMu.Unlock()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	_, err = f.Write(append(b, '\n'))
	require.NoError(t, err)
}

// check runs the world's checker and fails the test on any violation.
func check(t *testing.T, w *faults.World, tl *tally, opt faults.CheckOptions) faults.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := w.Check(ctx, opt)
	require.NoError(t, err)
	tl.Checks += rep.Checks
	tl.Defects += len(rep.Violations)
	require.NoError(t, rep.Err(), "invariants after round %d", tl.Rounds)
	return rep
}

var (
	buildMu  sync.Mutex
	binaries = map[string]string{}
)

// binary builds a service's binary with -tags failpoints once per test
// process.
func binary(t *testing.T, service string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if b, ok := binaries[service]; ok {
		return b
	}
	dir, err := os.MkdirTemp("", "craig-faults-bin-")
	require.NoError(t, err)
	out := filepath.Join(dir, service)
	cmd := exec.Command("go", "build", "-tags", "failpoints", "-o", out, "github.com/craig/retention/services/"+service+"/cmd/"+service)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "build %s with failpoints: %s", service, b)
	binaries[service] = out
	return out
}

// s3Endpoint is the S3 server's endpoint (http://host:port) of the test
// store URL; it also sets the local store's credentials.
func s3Endpoint(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(kerneltest.S3URL(t))
	require.NoError(t, err)
	return u.Query().Get("endpoint")
}

// seedRules inserts n rule_evaluations aged past the hot window (hot:
// an hour old) and returns them with their to_jsonb text.
func seedQuery(hot bool) string {
	age := "make_interval(days => 100, secs => g)"
	if hot {
		age = "make_interval(hours => 1, secs => g)"
	}
	return `INSERT INTO rule_evaluations AS t (evaluated_at, rule_id, input, output)
		SELECT now() - ` + age + `, 'r-' || (g % 7), jsonb_build_object('n', g, 'amount', 12.50, 'case_id', g % 13), '{}' FROM generate_series(1, $1) g
		RETURNING t.id, to_jsonb(t)::text`
}

// rulesWorld is a rules database and a bucket of its own.
type rulesWorld struct {
	*faults.World
	db     *kerneltest.DB
	bucket *faults.Bucket
	url    string // the bucket's store URL
	// keyFile is the subject key every run indexes archives with.
	keyFile string
}

func newRulesWorld(t *testing.T) *rulesWorld {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	endpoint := s3Endpoint(t)
	db := kerneltest.NewDB(t, rules.Spec().MigrationSets()...)
	b, err := faults.NewBucket(ctx, endpoint)
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := b.Remove(context.Background()); err != nil {
			t.Logf("remove bucket %s: %v", b.Name, err)
		}
	})
	st, err := store.Open(ctx, b.URL(endpoint))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	keyFile := filepath.Join(t.TempDir(), "subject.key")
	require.NoError(t, os.WriteFile(keyFile, []byte("fault suite subject key, at least 32 bytes long\n"), 0o600))
	key, err := subject.LoadKey(keyFile)
	require.NoError(t, err)
	return &rulesWorld{
		World: &faults.World{Pool: db.Pool, Store: st, Service: rules.Name, Table: rules.EvaluationsTable, Specs: rules.ArchiveTables(),
			Aged: map[uuid.UUID]string{}, Hot: map[uuid.UUID]string{}, SubjectKey: key},
		db: db, bucket: b, url: b.URL(endpoint), keyFile: keyFile,
	}
}

func (w *rulesWorld) seed(t *testing.T, aged, hot int) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, w.Seed(ctx, seedQuery(false), aged, false))
	require.NoError(t, w.Seed(ctx, seedQuery(true), hot, true))
}

// env is the rules environment of the world (archiver on, small batches).
func (w *rulesWorld) env(extra ...string) []string {
	e := func(k, v string) string { return settings.EnvVar(rules.Name, k) + "=" + v }
	return append(append(os.Environ(), e("database_url", w.db.URL), e("archive.enabled", "true"), e("archive.store.url", w.url),
		e("archive.subject_key_file", w.keyFile), e("archive.batch_size", "100"), e("archive.interval_seconds", "0"), e("log_level", "warn")), extra...)
}

// result is one process run.
type result struct {
	killed bool
	code   int
	stderr string
	stdout string
}

// runProcess runs bin with args and env, bounded by timeout.
func runProcess(t *testing.T, bin string, env []string, timeout time.Duration, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "%s %v did not finish within %v: %s", bin, args, timeout, errOut.String())
	res := result{stderr: errOut.String(), stdout: out.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		ws, _ := ee.Sys().(syscall.WaitStatus)
		res.killed = ws.Signaled() && ws.Signal() == syscall.SIGKILL
		res.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run %s: %v", bin, err)
	}
	return res
}

func failpointEnv(point string, hit int) []string {
	return []string{"CRAIG_FAILPOINT=" + point, fmt.Sprintf("CRAIG_FAILPOINT_HIT=%d", hit)}
}
