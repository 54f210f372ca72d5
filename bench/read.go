package bench

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/auth"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/pgsession"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/kernel/subject"
	"github.com/craig/retention/services/rules"
)

// Read scenario constants.
const (
	// readSeed makes the sampled ids the same in every run.
	readSeed = 13
	// readPutWorkers uploads the seeded archives in parallel (the seeding
	// is not measured).
	readPutWorkers = 8
	// readLedgerBatch books this many ledger rows per transaction.
	readLedgerBatch = 500
)

// readWorld is the read scenario's database, store prefix and API.
type readWorld struct {
	pool    *pgxpool.Pool
	st      *store.Store
	service string
	base    string
	token   string
	client  *http.Client
	keys    []string // every object written (deleted at the end)
	idLow   uint64
	// key indexes the archives by subject; archives is how many there are
	// (caseOf spreads the fetched subject over readSubjectArchives).
	key      subject.Key
	archives int
	// cases, when set, is the case of row j of archive i (the disposition
	// batch's world); else caseOf's spread.
	cases func(i, j int) int
}

// Subject read constants.
const (
	// readSubjectCase is the case the subject fetch asks for: in row 0 of
	// readSubjectArchives archives spread over the ledger, nowhere else.
	readSubjectCase = 9_000_000_001
	// readSubjectArchives is how many archives hold it.
	readSubjectArchives = 5
	// readSubjectsPerArchive is how many other cases each archive holds
	// (a case's evaluations come in bursts): the index's size.
	readSubjectsPerArchive = 10
)

// caseOf is the case of row j of archive i.
func (w *readWorld) caseOf(i, j int) int {
	if w.cases != nil {
		return w.cases(i, j)
	}
	step := max(w.archives/readSubjectArchives, 1)
	if j == 0 && i%step == 0 && i/step < readSubjectArchives {
		return readSubjectCase
	}
	return 1 + (i*7+j%readSubjectsPerArchive)%50_000
}

// subjectHashes are the keyed hashes of the cases of archive i.
func (w *readWorld) subjectHashes(i, rows int) ([][]byte, error) {
	seen := map[int]bool{}
	var out [][]byte
	for j := range rows {
		c := w.caseOf(i, j)
		if seen[c] {
			continue
		}
		seen[c] = true
		s, err := subject.Parse("case:" + strconv.Itoa(c))
		if err != nil {
			return nil, err
		}
		out = append(out, w.key.Hash(s))
	}
	return out, nil
}

// rowID is the id of row j of archive i: ordered by (i, j), so each
// archive covers one id range.
func (w *readWorld) rowID(seq uint64) uuid.UUID {
	var id uuid.UUID
	binary.BigEndian.PutUint64(id[:8], seq)
	binary.BigEndian.PutUint64(id[8:], w.idLow)
	return id
}

// runRead measures the read side: ReadArchives archives of
// ReadRowsPerArchive rule_evaluations rows each, booked in the ledger and
// on the real S3 server, served by the kernel's archive API over HTTP with
// JWT auth; the p99 of fetching ReadFetches random archived rows by id,
// and a deep verify's throughput against a plain GET + sha256 of the same
// objects, in Rounds rounds (order alternating).
func (r *runner) runRead(ctx context.Context) (*ReadResult, error) {
	w, cleanup, err := r.readWorld(ctx)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	res := &ReadResult{Archives: r.cfg.ReadArchives, RowsPerArchive: r.cfg.ReadRowsPerArchive, Fetches: r.cfg.ReadFetches,
		VerifyArchives: r.cfg.ReadArchives}
	start := time.Now()
	if err := w.seed(ctx, r.cfg.ReadArchives, r.cfg.ReadRowsPerArchive); err != nil {
		return nil, fmt.Errorf("seed the read scenario: %w", err)
	}
	res.SeedSeconds = round3(time.Since(start).Seconds())
	r.cfg.logf("read: %d archives of %d rows booked in %.1f s", r.cfg.ReadArchives, r.cfg.ReadRowsPerArchive, res.SeedSeconds)
	lat, err := w.fetchRandom(ctx, r.cfg.ReadFetches, r.cfg.ReadArchives, r.cfg.ReadRowsPerArchive)
	if err != nil {
		return nil, err
	}
	res.FetchP50MS, res.FetchP99MS = round3(percentile(lat, 50)), round3(percentile(lat, 99))
	r.cfg.logf("read: fetch by id through the API p50 %.2f ms, p99 %.2f ms (%d ids)", res.FetchP50MS, res.FetchP99MS, len(lat))
	if res.Subject, err = w.fetchSubject(ctx, r.cfg.ReadFetches); err != nil {
		return nil, err
	}
	r.cfg.logf("read: fetch a subject in %d of %d archives through the API p50 %.2f ms, p99 %.2f ms (%d fetches, index of %d rows)",
		res.Subject.ArchivesRead, r.cfg.ReadArchives, res.Subject.FetchP50MS, res.Subject.FetchP99MS, res.Subject.Fetches, res.Subject.IndexRows)
	var ratios []float64
	for round := range r.cfg.Rounds {
		run, err := w.verifyRound(ctx, round, res.VerifyArchives)
		if err != nil {
			return nil, fmt.Errorf("read round %d: %w", round+1, err)
		}
		r.cfg.logf("read round %d/%d: deep verify %.0f archives/s, GET+sha256 %.0f archives/s, ratio %.3f", round+1, r.cfg.Rounds,
			run.VerifyArchivesPerSec, run.GetArchivesPerSec, run.Ratio)
		res.Runs = append(res.Runs, run)
		ratios = append(ratios, run.Ratio)
	}
	res.VerifyVsGetRatio = round3(median(ratios))
	return res, nil
}

// readWorld creates the database, the store prefix and the API server.
func (r *runner) readWorld(ctx context.Context) (*readWorld, func(), error) {
	sets := rules.Spec().MigrationSets()
	name := r.srv.name("read")
	dbURL, err := r.srv.create(ctx, name, "")
	if err != nil {
		return nil, nil, err
	}
	if err := migrateDB(ctx, dbURL, sets); err != nil {
		return nil, nil, err
	}
	pool, err := pgsession.NewPool(ctx, dbURL)
	if err != nil {
		return nil, nil, err
	}
	st, err := store.Open(ctx, r.cfg.S3URL)
	if err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("open the S3 store (start it with `go tool mage store:up`): %w", err)
	}
	var low [8]byte
	_, _ = rand.Read(low[:])
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	key, err := subject.NewKey(secret)
	if err != nil {
		pool.Close()
		_ = st.Close()
		return nil, nil, err
	}
	w := &readWorld{pool: pool, st: st, service: "bench-read-" + randomSuffix(), idLow: binary.BigEndian.Uint64(low[:]),
		client: &http.Client{Timeout: time.Minute}, key: key, archives: r.cfg.ReadArchives}
	stop, err := w.serveAPI(ctx)
	if err != nil {
		pool.Close()
		_ = st.Close()
		return nil, nil, err
	}
	return w, func() {
		stop()
		w.deleteObjects()
		pool.Close()
		_ = st.Close()
		r.discard(name)
	}, nil
}

// serveAPI serves the kernel's archive API for the world's service on a
// loopback port, with an HS256 key and a token of every scope.
func (w *readWorld) serveAPI(ctx context.Context) (func(), error) {
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	v, err := auth.NewVerifier(auth.Config{HS256Secret: hex.EncodeToString(secret)})
	if err != nil {
		return nil, err
	}
	w.token, err = jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "bench:auditor",
		"scope": "archive:read archive:run", "exp": time.Now().Add(24 * time.Hour).Unix()}).SignedString([]byte(hex.EncodeToString(secret)))
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	api, err := w.archiveAPI(v, reg, logger)
	if err != nil {
		return nil, err
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv, ln := app.NewServer(app.Handler(app.HandlerDeps{Pool: w.pool, Gatherer: reg, Archive: api, Logger: logger}), ln, app.DefaultServerLimits())
	go func() { _ = srv.Serve(ln) }()
	w.base = "http://" + ln.Addr().String() + "/admin/archive/"
	return func() { _ = srv.Close() }, nil
}

func (w *readWorld) archiveAPI(v *auth.Verifier, reg prometheus.Registerer, logger *slog.Logger) (*app.ArchiveAPI, error) {
	am, err := metrics.NewAdmin(reg)
	if err != nil {
		return nil, err
	}
	vm, err := metrics.NewVerify(reg)
	if err != nil {
		return nil, err
	}
	pm, err := metrics.NewPurge(reg)
	if err != nil {
		return nil, err
	}
	arm, err := metrics.NewArchive(reg)
	if err != nil {
		return nil, err
	}
	spec := rules.Spec()
	cfg := archiveSettings(spec)
	// The engine is the API's "archiver enabled" (it is never run here).
	eng, err := archive.New(w.pool, w.st, spec.Archive.Tables(), spec.Archive.Bookkeeper.Bookkeep, archive.Config{Service: w.service, HotWindowDays: cfg.HotWindowDays,
		BatchSize: cfg.BatchSize, MaxBatchBytes: cfg.MaxBatchBytes}, logger, arm)
	if err != nil {
		return nil, err
	}
	lm, err := lifecycle.New(w.pool, w.st, lifecycle.Config{Service: w.service, SubjectKey: w.key}, logger, pm)
	if err != nil {
		return nil, err
	}
	return &app.ArchiveAPI{Verifier: v, Metrics: am, Logger: logger, Lifecycle: lm, Engine: eng, Knob: "bench",
		Reader: archiveread.New(w.pool, w.st, w.service, spec.Archive.Tables()).WithSubjectKey(w.key), VerifyMetrics: vm}, nil
}

// seedArchive is one archive's objects and ledger facts.
type seedArchive struct {
	data     []byte
	manifest archive.Manifest
}

// seed writes n archives of rows rows each (data and manifest objects, in
// parallel) and books their ledger rows, readLedgerBatch per transaction.
func (w *readWorld) seed(ctx context.Context, n, rows int) error {
	cols, err := archive.TableColumns(ctx, w.pool, evaluationsTable)
	if err != nil {
		return err
	}
	ident := w.st.Identity()
	out := make([]archive.Manifest, n)
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(readPutWorkers)
	for i := range n {
		g.Go(func() error {
			a, err := w.build(i, rows, cols, ident)
			if err != nil {
				return err
			}
			if err := w.st.PutCreate(gctx, a.manifest.DataKey, a.data, store.ContentTypeNDJSON); err != nil {
				return err
			}
			mb, err := json.MarshalIndent(a.manifest, "", "  ")
			if err != nil {
				return err
			}
			if err := w.st.PutCreate(gctx, a.manifest.ManifestKey, mb, store.ContentTypeJSON); err != nil {
				return err
			}
			mu.Lock()
			w.keys = append(w.keys, a.manifest.DataKey, a.manifest.ManifestKey)
			mu.Unlock()
			out[i] = a.manifest
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return w.book(ctx, out)
}

// build renders archive i: rows lines shaped like to_jsonb of
// rule_evaluations (about 190 bytes each), aged 100 to 400 days.
func (w *readWorld) build(i, rows int, cols []archive.Column, ident store.Identity) (seedArchive, error) {
	id := uuid.Must(uuid.NewV7())
	at := time.Now().UTC().Add(-time.Duration(400*24-i%(300*24)) * time.Hour).Truncate(time.Second)
	keys, err := store.NewArchiveKeys(w.service, evaluationsTable, at, id.String())
	if err != nil {
		return seedArchive{}, err
	}
	var b strings.Builder
	b.Grow(rows * 200)
	for j := range rows {
		seq := uint64(i)*uint64(rows) + uint64(j)
		fmt.Fprintf(&b, `{"id": "%s", "input": {"amount": 12.50, "case_id": %d, "note": "bench evaluation input"}, "output": {"eligible": true}, "rule_id": "rule-%d", "evaluated_at": "%s"}`+"\n",
			w.rowID(seq), w.caseOf(i, j), j%97, at.Add(time.Duration(j)*time.Millisecond).Format("2006-01-02T15:04:05.000+00:00"))
	}
	data := []byte(b.String())
	first, last := at, at.Add(time.Duration(rows-1)*time.Millisecond)
	return seedArchive{data: data, manifest: archive.Manifest{Format: "ndjson", ArchiveID: id, Service: w.service, Table: evaluationsTable,
		RecordCount: rows, DataKey: keys.Data, ManifestKey: keys.Manifest, DataSHA256: archive.SHA256Hex(data), Endpoint: ident.Endpoint,
		Bucket: ident.Bucket, FirstRecordID: w.rowID(uint64(i) * uint64(rows)), LastRecordID: w.rowID(uint64(i)*uint64(rows) + uint64(rows-1)),
		FirstRecordAt: first, LastRecordAt: last, HotWindowDays: 90, ArchivedAt: time.Now().UTC().Truncate(time.Microsecond),
		ArchivedBy: archive.SystemActor, Columns: cols, Fingerprint: archive.Fingerprint(cols)}}, nil
}

// book inserts the ledger rows through rules' own bookkeeping.
func (w *readWorld) book(ctx context.Context, ms []archive.Manifest) error {
	for start := 0; start < len(ms); start += readLedgerBatch {
		tx, err := w.pool.Begin(ctx)
		if err != nil {
			return err
		}
		for i, m := range ms[start:min(start+readLedgerBatch, len(ms))] {
			err := rules.Spec().Archive.Bookkeeper.Bookkeep(ctx, tx, m, m.ArchivedBy)
			var hashes [][]byte
			if err == nil {
				hashes, err = w.subjectHashes(start+i, m.RecordCount)
			}
			if err == nil {
				_, err = archive.IndexSubjects(ctx, tx, m.ArchiveID, hashes, true)
			}
			if err != nil {
				_ = tx.Rollback(ctx)
				return err
			}
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
	}
	return nil
}

// fetchRandom fetches n seeded-random archived rows by id through the API,
// one at a time, and returns each call's latency.
func (w *readWorld) fetchRandom(ctx context.Context, n, archives, rows int) ([]time.Duration, error) {
	rng := mrand.New(mrand.NewPCG(readSeed, uint64(archives)))
	lat := make([]time.Duration, 0, n)
	for range n {
		seq := rng.Uint64N(uint64(archives) * uint64(rows))
		id := w.rowID(seq)
		start := time.Now()
		body, err := w.call(ctx, http.MethodGet, "rows/"+evaluationsTable+"/"+id.String(), nil)
		lat = append(lat, time.Since(start))
		if err != nil {
			return nil, err
		}
		var f struct {
			Source string `json:"source"`
			Row    struct {
				ID uuid.UUID `json:"id"`
			} `json:"row"`
		}
		if err := json.Unmarshal(body, &f); err != nil {
			return nil, fmt.Errorf("fetch %s: %w", id, err)
		}
		if f.Source != "archive" || f.Row.ID != id {
			return nil, fmt.Errorf("fetch %s: got %.200s", id, body)
		}
	}
	return lat, nil
}

// call makes one authenticated API call and returns a 200's body.
func (w *readWorld) call(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	return w.do(ctx, method, w.base+path, body)
}

// get makes one authenticated GET of a full URL and returns a 200's body.
func (w *readWorld) get(ctx context.Context, u string) ([]byte, error) {
	return w.do(ctx, http.MethodGet, u, nil)
}

// do makes one authenticated API call to u and returns a 200's body.
func (w *readWorld) do(ctx context.Context, method, u string, body []byte) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = strings.NewReader(string(body))
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+w.token)
	resp, err := w.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: %d %.200s", method, u, resp.StatusCode, out)
	}
	return out, nil
}

// verifyRound times a deep verify of the first n archives through the API
// and a plain GET + sha256 of the same data objects, in alternating order.
func (w *readWorld) verifyRound(ctx context.Context, round, n int) (ReadRun, error) {
	run := ReadRun{Round: round + 1}
	keys, err := w.firstDataKeys(ctx, n)
	if err != nil {
		return run, err
	}
	verify := func() error {
		start := time.Now()
		body, err := w.call(ctx, http.MethodPost, "verify", fmt.Appendf(nil, `{"deep": true, "limit": %d}`, n))
		run.VerifySeconds = time.Since(start).Seconds()
		if err != nil {
			return err
		}
		var rep archiveread.Report
		if err := json.Unmarshal(body, &rep); err != nil {
			return err
		}
		if rep.Checked != n || rep.Failed != 0 || len(rep.ColumnDrift) != 0 {
			return fmt.Errorf("deep verify: checked %d of %d, %d failed %v, drift %v", rep.Checked, n, rep.Failed, rep.Failures, rep.ColumnDrift)
		}
		return nil
	}
	get := func() error {
		start := time.Now()
		for _, k := range keys {
			data, err := w.st.Get(ctx, k.key)
			if err != nil {
				return err
			}
			if archive.SHA256Hex(data) != k.sha {
				return fmt.Errorf("%s: sha256 differs", k.key)
			}
		}
		run.GetSeconds = time.Since(start).Seconds()
		return nil
	}
	steps := []func() error{verify, get}
	if round%2 == 1 {
		steps = []func() error{get, verify}
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return run, err
		}
	}
	run.VerifyArchivesPerSec = round3(float64(n) / run.VerifySeconds)
	run.GetArchivesPerSec = round3(float64(n) / run.GetSeconds)
	run.Ratio = round3(run.GetSeconds / run.VerifySeconds)
	return run, nil
}

type dataKey struct{ key, sha string }

// firstDataKeys are the data keys of the n archives a verify checks first
// (it walks the ledger by archive_id).
func (w *readWorld) firstDataKeys(ctx context.Context, n int) ([]dataKey, error) {
	rows, err := w.pool.Query(ctx, sqlFirstDataKeys, n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []dataKey
	for rows.Next() {
		var k dataKey
		if err := rows.Scan(&k.key, &k.sha); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) != n {
		return nil, fmt.Errorf("ledger has %d archives, want %d", len(out), n)
	}
	return out, nil
}

// deleteObjects deletes every object the scenario wrote (every version).
func (w *readWorld) deleteObjects() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(readPutWorkers)
	for _, k := range w.keys {
		g.Go(func() error {
			_, err := w.st.DeleteIfExists(gctx, k)
			return err
		})
	}
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		slog.Default().Warn("read scenario: deleting its objects failed", slog.Any("error", err))
	}
}

// fetchSubject fetches every row of readSubjectCase through the API n
// times and checks each answer: exactly its rows, from exactly the
// archives that hold it.
func (w *readWorld) fetchSubject(ctx context.Context, n int) (*SubjectReadResult, error) {
	holding := min(readSubjectArchives, w.archives)
	res := &SubjectReadResult{Holding: holding, SubjectsPerArchive: readSubjectsPerArchive, Fetches: n}
	if err := w.pool.QueryRow(ctx, "SELECT COALESCE(sum(cardinality(subject_hashes)), 0)::int FROM archive_subjects").Scan(&res.IndexRows); err != nil {
		return nil, err
	}
	u := strings.TrimSuffix(w.base, "archive/") + "subjects/case:" + strconv.Itoa(readSubjectCase) + "/rows"
	lat := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		body, err := w.get(ctx, u)
		lat = append(lat, time.Since(start))
		if err != nil {
			return nil, err
		}
		lines := strings.Split(strings.TrimSpace(string(body)), "\n")
		var sum struct {
			Summary struct {
				Rows         int `json:"rows"`
				ArchivesRead int `json:"archives_read"`
			} `json:"summary"`
		}
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
			return nil, fmt.Errorf("subject fetch summary: %w", err)
		}
		if sum.Summary.Rows != holding || sum.Summary.ArchivesRead != holding || len(lines) != holding+1 {
			return nil, fmt.Errorf("subject fetch: %d rows from %d archives in %d lines, want %d from %d",
				sum.Summary.Rows, sum.Summary.ArchivesRead, len(lines), holding, holding)
		}
		res.Rows, res.ArchivesRead = sum.Summary.Rows, sum.Summary.ArchivesRead
	}
	res.FetchP50MS, res.FetchP99MS = round3(percentile(lat, 50)), round3(percentile(lat, 99))
	return res, nil
}
