package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/migrations"
	"github.com/craig/retention/services/rules"
	"github.com/craig/retention/services/security"
	"github.com/jackc/pgx/v5"
)

// Archive configurations.
const (
	cfgArchive = "archive_pass"
	cfgCopy    = "copy_to_stdout"
	// cfgArchiveSubjects is rules' pass with the subject index
	// (archive.subject_key_file set): its cost is the ratio to cfgArchive.
	cfgArchiveSubjects = "archive_pass_subjects"
)

// archiveActor is recorded as archived_by by the benchmark's passes.
const archiveActor = "bench:archive"

// Credentials of the local versitygw (store:up's root user), used when the
// environment names none, as the test harness does.
const (
	localS3AccessKey = "craig"
	localS3SecretKey = "craigsecret"
)

// archiveTarget is one archiving service's table the archive scenarios
// measure: its binary (run as a child), its seed, and the COPY ceiling of
// the same aged rows.
type archiveTarget struct {
	name      string // the scenario's label (template and database names)
	service   string // the binary's service name (its CRAIG_<SVC>__ prefix)
	binary    string
	table     string
	seed      string // inserts $1 rows, the first $2 of them aged
	countAged string // counts the rows older than $1 days
	copyAged  string // COPY of the aged rows as to_jsonb
	batch     int    // the service's default archive.batch_size
	sets      []migrations.Set
	// The floor's statements (floorOnce).
	floorCopy, floorAdvance, floorDelete string
}

// rulesTarget is rule_evaluations (the archive scenario).
func (r *runner) rulesTarget() archiveTarget {
	return archiveTarget{name: "archive", service: "rules", binary: r.cfg.RulesBinary, table: evaluationsTable,
		seed: seedRuleEvaluations, countAged: countAgedEvaluations, copyAged: copyAgedEvaluations, batch: archiveSettings(rules.Spec()).BatchSize,
		sets: rules.Spec().MigrationSets(), floorCopy: floorCopyEvaluations, floorAdvance: floorAdvanceEvaluations, floorDelete: floorDeleteEvaluations}
}

// securityTarget is audit_log (the security_archive scenario).
func (r *runner) securityTarget() archiveTarget {
	return archiveTarget{name: "secarchive", service: "security", binary: r.cfg.SecurityBinary, table: auditLogTable,
		seed: seedAuditLog, countAged: countAgedAuditLog, copyAged: copyAgedAuditLog, batch: archiveSettings(security.Spec()).BatchSize,
		sets: security.Spec().MigrationSets(), floorCopy: floorCopyAuditLog, floorAdvance: floorAdvanceAuditLog, floorDelete: floorDeleteAuditLog}
}

// passReport is the part of `<svc> archive run --json` the benchmark reads.
type passReport struct {
	More   bool `json:"more"`
	Tables []struct {
		Table    string  `json:"table"`
		Archived int64   `json:"archived"`
		Error    *string `json:"error"`
		Archives []struct {
			DataKey     string `json:"data_key"`
			ManifestKey string `json:"manifest_key"`
		} `json:"archives"`
	} `json:"tables"`
}

// runArchive measures an archive pass of the target's aged rows (its
// binary as a child process, against the real S3 server) against COPY of
// the same rows, in Rounds interleaved rounds; for rules also the big-row
// run.
func (r *runner) runArchive(ctx context.Context, tg archiveTarget) (*ArchiveResult, error) {
	as := archive.DefaultSettings()
	if as.HotWindowDays != archiveCeilingWindowDays {
		return nil, fmt.Errorf("the COPY ceiling's literal window (%d days) differs from the archiver's default hot window (%d): update copyAgedEvaluations",
			archiveCeilingWindowDays, as.HotWindowDays)
	}
	if floorBatchSizes[tg.table] != tg.batch {
		return nil, fmt.Errorf("the floor's literal batch size for %s (%d) differs from the service's default (%d): update floorCopy*", tg.table, floorBatchSizes[tg.table], tg.batch)
	}
	sets := tg.sets
	hot := max(r.cfg.ArchiveRows/10, 1)
	tpl, err := r.archiveTemplate(ctx, tg, sets, hot, as)
	if err != nil {
		return nil, err
	}
	st, err := store.Open(ctx, r.cfg.S3URL)
	if err != nil {
		return nil, fmt.Errorf("open the S3 store (start it with `go tool mage store:up`): %w", err)
	}
	defer func() { _ = st.Close() }()
	if err := resetPrefix(ctx, st, tg.service); err != nil {
		return nil, err
	}
	res := &ArchiveResult{
		Table: tg.table, Rows: r.cfg.ArchiveRows, HotRows: hot, BatchSize: tg.batch, MaxBatchBytes: as.MaxBatchBytes,
		RSSGoalMiB: 64 + float64(as.MaxBatchBytes)/(1<<20),
	}
	if err := r.archiveRounds(ctx, tg, st, tpl, as, res); err != nil {
		return nil, err
	}
	res.summarize()
	if tg.service == "rules" {
		if res.BigRows, err = r.archiveBigRows(ctx, tg, st, sets, as, r.cfg.ArchiveBigRows, bigRowBytes); err != nil {
			return nil, err
		}
		if res.HugeRows, err = r.archiveBigRows(ctx, tg, st, sets, as, hugeRows(r.cfg), hugeRowBytes); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// archiveTemplate seeds the scenario's template: ArchiveRows aged and hot
// rows of the target's table, and checks the aged count.
func (r *runner) archiveTemplate(ctx context.Context, tg archiveTarget, sets []migrations.Set, hot int, as archive.Settings) (string, error) {
	r.cfg.logf("%s: seeding %d aged + %d hot %s", tg.name, r.cfg.ArchiveRows, hot, tg.table)
	tpl := r.srv.name(tg.name)
	err := r.buildTemplate(ctx, tpl, sets, func(conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, tg.seed, r.cfg.ArchiveRows+hot, r.cfg.ArchiveRows); err != nil {
			return fmt.Errorf("seed %s: %w", tg.table, err)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	var aged int64
	if err := withConn(ctx, r.mustURL(tpl), func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, tg.countAged, as.HotWindowDays).Scan(&aged)
	}); err != nil {
		return "", err
	}
	if aged != int64(r.cfg.ArchiveRows) {
		return "", fmt.Errorf("seeded %d aged rows, want %d", aged, r.cfg.ArchiveRows)
	}
	return tpl, nil
}

// archiveRounds runs the archive pass and COPY, interleaved, Rounds times.
func (r *runner) archiveRounds(ctx context.Context, tg archiveTarget, st *store.Store, tpl string, as archive.Settings, res *ArchiveResult) error {
	configs := []string{cfgArchive, cfgCopy, cfgFloor}
	if tg.batch != specBatchSize {
		configs = append(configs, cfgArchiveSmallBatch)
	}
	var keyEnv string
	if tg.service == "rules" {
		key, cleanup, err := benchSubjectKey()
		if err != nil {
			return err
		}
		defer cleanup()
		keyEnv = "CRAIG_RULES__ARCHIVE__SUBJECT_KEY_FILE=" + key
		configs = append(configs, cfgArchiveSubjects)
	}
	for round := range r.cfg.Rounds {
		for i := range configs {
			name := configs[(i+round)%len(configs)]
			var run ArchiveRun
			var err error
			switch name {
			case cfgArchive:
				run, err = r.archiveOnce(ctx, tg, st, tpl, round, as)
			case cfgArchiveSubjects:
				run, err = r.archiveOnce(ctx, tg, st, tpl, round, as, keyEnv)
				run.Config = cfgArchiveSubjects
			case cfgArchiveSmallBatch:
				small := tg
				small.batch = specBatchSize
				run, err = r.archiveOnce(ctx, small, st, tpl, round, as, "CRAIG_"+strings.ToUpper(tg.service)+"__ARCHIVE__BATCH_SIZE="+strconv.Itoa(specBatchSize))
				run.Config = cfgArchiveSmallBatch
			case cfgFloor:
				run, err = r.floorOnce(ctx, tg, st, tpl, round)
			default:
				run, err = r.copyOnce(ctx, tg, tpl, round)
			}
			if err != nil {
				return fmt.Errorf("%s %s round %d: %w", tg.name, name, round+1, err)
			}
			run.Order = i + 1
			r.cfg.logf("%s round %d/%d %-15s %7d rows %8.0f rows/s in %6.2f s, peak RSS %.1f MiB",
				tg.name, round+1, r.cfg.Rounds, name, run.Rows, run.RowsPerSec, run.Seconds, run.PeakRSSMiB)
			res.Runs = append(res.Runs, run)
		}
	}
	return nil
}

// summarize sets the medians and the per-round ratio to COPY from the runs.
func (res *ArchiveResult) summarize() {
	var arch, cp, ratios, rss, subj, costs, floor, floorRatios, small, smallRSS []float64
	for _, run := range res.Runs {
		switch run.Config {
		case cfgCopy:
			cp = append(cp, run.RowsPerSec)
			continue
		case cfgFloor:
			floor = append(floor, run.RowsPerSec)
			continue
		case cfgArchiveSmallBatch:
			small, smallRSS = append(small, run.RowsPerSec), append(smallRSS, run.PeakRSSMiB)
			continue
		}
		if run.Config == cfgArchiveSubjects {
			subj = append(subj, run.RowsPerSec)
			for _, other := range res.Runs {
				if other.Config == cfgArchive && other.Round == run.Round && other.RowsPerSec > 0 {
					costs = append(costs, run.RowsPerSec/other.RowsPerSec)
				}
			}
			continue
		}
		arch, rss = append(arch, run.RowsPerSec), append(rss, run.PeakRSSMiB)
		res.PeakRSSMaxMiB = max(res.PeakRSSMaxMiB, run.PeakRSSMiB)
		for _, other := range res.Runs {
			if other.Config == cfgCopy && other.Round == run.Round && other.RowsPerSec > 0 {
				ratios = append(ratios, run.RowsPerSec/other.RowsPerSec)
			}
			if other.Config == cfgFloor && other.Round == run.Round && other.RowsPerSec > 0 {
				floorRatios = append(floorRatios, run.RowsPerSec/other.RowsPerSec)
			}
		}
	}
	res.ArchiveRowsPS, res.CopyRowsPS, res.Ratio, res.PeakRSSMiB = median(arch), median(cp), round3(median(ratios)), median(rss)
	if len(costs) > 0 {
		res.SubjectIndexRowsPS, res.SubjectIndexCostRatio = median(subj), round3(median(costs))
	}
	if len(floorRatios) > 0 {
		res.FloorRowsPS, res.FloorRatio = median(floor), round3(median(floorRatios))
	}
	if len(small) > 0 {
		res.SpecBatchRowsPS, res.SpecBatchPeakRSSMiB = median(small), median(smallRSS)
	}
}

// benchSubjectKey writes a subject key file for the passes with the index.
func benchSubjectKey() (string, func(), error) {
	f, err := os.CreateTemp("", "craig-bench-subject-*.key")
	if err != nil {
		return "", nil, err
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	_, werr := f.WriteString(hex.EncodeToString(secret) + "\n")
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(f.Name())
		return "", nil, err
	}
	return f.Name(), func() { _ = os.Remove(f.Name()) }, nil
}

// Big-row run parameters: the 200 KiB run, and the 20 MiB run (a row of
// more than half of max_batch_bytes: one row a batch, the pipeline paused).
const (
	bigRowBytes  = 200 << 10
	hugeRowBytes = 20 << 20
	bigBatchSize = archive.MaxBatchSize
)

// hugeRows is the 20 MiB run's rows: 12 (240 MiB), 3 in the smoke run.
func hugeRows(cfg Config) int {
	if cfg.Smoke {
		return 3
	}
	return 12
}

// archiveBigRows runs one `rules archive run` over n rows of rowBytes at
// batch size 10,000 and the default max_batch_bytes, and reads its peak
// RSS.
func (r *runner) archiveBigRows(ctx context.Context, tg archiveTarget, st *store.Store, sets []migrations.Set, as archive.Settings, n, rowBytes int) (*ArchiveBigRows, error) {
	r.cfg.logf("archive: seeding %d aged rule_evaluations of %d KiB", n, rowBytes>>10)
	tpl := r.srv.name("archive_big_" + strconv.Itoa(rowBytes>>10))
	if err := r.buildTemplate(ctx, tpl, sets, func(conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, seedBigRuleEvaluations, n, rowBytes); err != nil {
			return fmt.Errorf("seed big rule_evaluations: %w", err)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	db, err := r.srv.copyOf(ctx, tpl, "archive_big_"+strconv.Itoa(rowBytes>>10), 0)
	if err != nil {
		return nil, err
	}
	defer r.discard(db.name)
	res := &ArchiveBigRows{Rows: n, RowBytes: rowBytes, BatchSize: bigBatchSize, MaxBatchBytes: as.MaxBatchBytes,
		RSSGoalMiB: 64 + 2*float64(as.MaxBatchBytes)/(1<<20)}
	rep, elapsed, rss, err := r.archivePass(ctx, tg, st, db.url, archive.MaxManualBudget, "CRAIG_RULES__ARCHIVE__BATCH_SIZE="+strconv.Itoa(bigBatchSize))
	if err != nil {
		return nil, fmt.Errorf("big rows: %w", err)
	}
	var archived int64
	for _, t := range rep.Tables {
		archived += t.Archived
		res.Archives += len(t.Archives)
	}
	if archived != int64(n) || rep.More {
		return nil, fmt.Errorf("archive run (big rows) archived %d rows (more: %v), want %d", archived, rep.More, n)
	}
	res.Seconds, res.PeakRSSMiB = elapsed.Seconds(), rss
	r.cfg.logf("archive big rows: %d rows of %d KiB at batch %d in %d archives, %.1f s, peak RSS %.1f MiB (goal ≤ %.0f)",
		n, rowBytes>>10, bigBatchSize, res.Archives, res.Seconds, res.PeakRSSMiB, res.RSSGoalMiB)
	return res, nil
}

// archiveOnce runs `rules archive run` on a fresh copy, timing the whole
// child process (start-up and the store's boot probe included) and reading
// its peak RSS; then it deletes the objects the pass wrote.
func (r *runner) archiveOnce(ctx context.Context, tg archiveTarget, st *store.Store, tpl string, round int, as archive.Settings, extraEnv ...string) (ArchiveRun, error) {
	run := ArchiveRun{Config: cfgArchive, Round: round + 1}
	db, err := r.srv.copyOf(ctx, tpl, tg.name, round)
	if err != nil {
		return run, err
	}
	defer r.discard(db.name)
	// A pass runs at most archive.MaxManualBudget batches: the benchmark
	// runs passes until one reports more=false, timing them all (each
	// child's start-up and boot probe included) and taking the largest
	// peak RSS.
	// The seeded rows' batches: an empty selection (of any table) costs no
	// batch of a pass's budget (ADR-071), whatever tables the service has.
	need := (r.cfg.ArchiveRows + tg.batch - 1) / tg.batch
	for pass := 0; ; pass++ {
		if pass > need {
			return run, fmt.Errorf("archive run: still more after %d passes", pass)
		}
		rep, elapsed, rss, err := r.archivePass(ctx, tg, st, db.url, min(need, archive.MaxManualBudget), extraEnv...)
		if err != nil {
			return run, err
		}
		run.Seconds += elapsed.Seconds()
		run.PeakRSSMiB = max(run.PeakRSSMiB, rss)
		for _, t := range rep.Tables {
			run.Rows += t.Archived
			run.Archives += len(t.Archives)
		}
		if !rep.More {
			break
		}
	}
	if run.Rows != int64(r.cfg.ArchiveRows) {
		return run, fmt.Errorf("archive runs archived %d rows, want all %d aged rows", run.Rows, r.cfg.ArchiveRows)
	}
	run.RowsPerSec = float64(run.Rows) / run.Seconds
	return run, nil
}

// archivePass runs one `rules archive run` child with budget batches and
// extra environment, deletes the objects it wrote, and returns its report,
// wall time and peak RSS in MiB.
func (r *runner) archivePass(ctx context.Context, tg archiveTarget, st *store.Store, dbURL string, budget int, extraEnv ...string) (passReport, time.Duration, float64, error) {
	cmd := exec.CommandContext(ctx, tg.binary, "archive", "run", "--json", "--budget", strconv.Itoa(budget), "--actor", archiveActor)
	cmd.Env = append(archiveEnv(os.Environ(), tg.service, dbURL, r.cfg.S3URL), extraEnv...)
	var stdout bytes.Buffer
	stderr := &tailBuffer{max: 16 << 10}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	start := time.Now()
	runErr := cmd.Run()
	elapsed := time.Since(start)

	var rep passReport
	parseErr := json.Unmarshal(stdout.Bytes(), &rep)
	var keys []string
	for _, t := range rep.Tables {
		for _, a := range t.Archives {
			keys = append(keys, a.DataKey, a.ManifestKey)
		}
	}
	cleanupErr := deleteObjects(ctx, st, keys)
	switch {
	case runErr != nil:
		return rep, 0, 0, fmt.Errorf("%s archive run: %w\n%s", tg.binary, runErr, stderr.String())
	case parseErr != nil:
		return rep, 0, 0, fmt.Errorf("%s archive run: unreadable report: %w\n%s", tg.binary, parseErr, stdout.String())
	case cleanupErr != nil:
		return rep, 0, 0, cleanupErr
	}
	for _, t := range rep.Tables {
		if t.Error != nil {
			return rep, 0, 0, fmt.Errorf("archive run: table %s: %s", t.Table, *t.Error)
		}
	}
	var rss float64
	if b, ok := peakRSSBytes(cmd.ProcessState); ok {
		rss = float64(b) / (1 << 20)
	}
	return rep, elapsed, rss, nil
}

// copyOnce streams the same aged rows out with COPY on a fresh copy.
func (r *runner) copyOnce(ctx context.Context, tg archiveTarget, tpl string, round int) (ArchiveRun, error) {
	run := ArchiveRun{Config: cfgCopy, Round: round + 1}
	db, err := r.srv.copyOf(ctx, tpl, "copy", round)
	if err != nil {
		return run, err
	}
	defer r.discard(db.name)
	err = withConn(ctx, db.url, func(conn *pgx.Conn) error {
		var w countingWriter
		start := time.Now()
		tag, err := conn.PgConn().CopyTo(ctx, &w, tg.copyAged)
		elapsed := time.Since(start)
		if err != nil {
			return fmt.Errorf("copy: %w", err)
		}
		run.Rows, run.Bytes = tag.RowsAffected(), w.n
		run.Seconds, run.RowsPerSec = elapsed.Seconds(), float64(run.Rows)/elapsed.Seconds()
		return nil
	})
	if err == nil && run.Rows != int64(r.cfg.ArchiveRows) {
		err = fmt.Errorf("COPY streamed %d rows, want %d", run.Rows, r.cfg.ArchiveRows)
	}
	return run, err
}

// archiveEnv is the child's environment: the parent's without any setting
// of the service (so nothing but the defaults and these apply), the scratch
// database, the archiver enabled with the bucket, and the local store's
// credentials when the environment names none.
func archiveEnv(parent []string, service, dbURL, s3URL string) []string {
	var env []string
	hasKey, hasSecret := false, false
	prefix := "CRAIG_" + strings.ToUpper(service) + "__"
	for _, kv := range parent {
		if strings.HasPrefix(kv, prefix) {
			continue
		}
		hasKey = hasKey || strings.HasPrefix(kv, "AWS_ACCESS_KEY_ID=")
		hasSecret = hasSecret || strings.HasPrefix(kv, "AWS_SECRET_ACCESS_KEY=")
		env = append(env, kv)
	}
	if !hasKey && !hasSecret {
		env = append(env, "AWS_ACCESS_KEY_ID="+localS3AccessKey, "AWS_SECRET_ACCESS_KEY="+localS3SecretKey)
	}
	return append(env,
		prefix+"DATABASE_URL="+dbURL,
		prefix+"ARCHIVE__ENABLED=true",
		prefix+"ARCHIVE__STORE__URL="+s3URL,
	)
}

// deleteObjects removes the objects a benchmark pass wrote.
func deleteObjects(ctx context.Context, st *store.Store, keys []string) error {
	for _, k := range keys {
		if _, err := st.DeleteIfExists(ctx, k); err != nil {
			return fmt.Errorf("delete benchmark object %s: %w", k, err)
		}
	}
	return nil
}

// countingWriter counts and discards what COPY streams.
type countingWriter struct{ n int64 }

func (w *countingWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	return len(p), nil
}

// tailBuffer keeps the last max bytes written (a child's log, for errors).
type tailBuffer struct {
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.b) }

// resetPrefix destroys every object under the service's prefix of the
// bench's store before its rounds: each round's database is new, and a
// journal of acts another run left there (the demo journals its schedule
// and dispositions under the same prefix of the local store) would make the
// service refuse to archive as a database restored behind it.
func resetPrefix(ctx context.Context, st *store.Store, service string) error {
	objs, err := st.ListObjects(ctx, store.Prefix+service+"/")
	if err != nil {
		return fmt.Errorf("list %s%s/: %w", store.Prefix, service, err)
	}
	for _, o := range objs {
		if _, err := st.DestroyReleased(ctx, o.Key); err != nil {
			return err
		}
	}
	return nil
}
