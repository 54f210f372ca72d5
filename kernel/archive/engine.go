package archive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/craig/retention/kernel/failpoint"
	"github.com/craig/retention/kernel/intent"
	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/journal"
	"github.com/craig/retention/kernel/lease"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/pgsession"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/kernel/subject"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Config bounds the engine.
type Config struct {
	// Service names the archiving service (manifest, keys, metrics).
	Service string
	// HotWindowDays: rows older than this many days are archived.
	HotWindowDays int
	// BatchSize is the most rows one batch selects.
	BatchSize int
	// MaxBatchBytes caps one NDJSON object; a batch that would exceed it is
	// truncated (the rest waits for the next batch) and a single row above
	// it is quarantined.
	MaxBatchBytes int64
	// LockKey is the advisory lock fencing passes; 0 means lease.ArchiveKey.
	LockKey int64
	// DBTimeout bounds each database step of a pass (the lease, a batch's
	// select, its delete transaction); 0 means DefaultDBTimeout.
	DBTimeout time.Duration
	// LedgerHolds: the bookkeeping writes the kernel's archive_ledger (every
	// service's does; a test's bookkeeper may not), so an archive booked
	// under an active hold is announced as held, and with ObjectLock (the
	// bucket has S3 Object Lock) gets its objects' legal holds, before its
	// rows' delete commits.
	LedgerHolds bool
	ObjectLock  bool
	// SubjectKey keys the subject index's hashes (archive.subject_key_file);
	// without it, archives of tables with subjects are booked unindexed
	// (subjects_indexed false) for the backfill. The index is written only
	// with LedgerHolds (it references the kernel's ledger).
	SubjectKey subject.Key
	// Journal is the service's journal of acts (ADR-070): while its gate
	// says the database is behind the store's journal (restored from a
	// backup), every pass is refused with journal.ErrBehind. Nil: none.
	Journal *journal.Journal
}

// Bounds of Config, shared with the settings validation.
const (
	MinHotWindowDays = 1
	MaxHotWindowDays = prune.MaxWindowDays
	MinBatchSize     = 1
	MaxBatchSize     = 10_000
	// MinMaxBatchBytes is the smallest object cap accepted: below 4 KiB
	// ordinary audit rows would be quarantined.
	MinMaxBatchBytes int64 = 4096
)

// Engine archives a service's tables.
type Engine struct {
	pool     *pgxpool.Pool
	store    *store.Store
	specs    []TableSpec
	bookkeep BookkeepFunc
	cfg      Config
	logger   *slog.Logger
	metrics  *metrics.Archive
	actor    string
	orphans  *intent.Sweeper
}

// New validates the configuration and returns an engine that attributes its
// passes to SystemActor (use WithActor for an operator's manual run).
func New(pool *pgxpool.Pool, st *store.Store, specs []TableSpec, bookkeep BookkeepFunc, cfg Config, logger *slog.Logger, m *metrics.Archive) (*Engine, error) {
	if err := cfg.validate(st); err != nil {
		return nil, fail(ErrConfig, "", err)
	}
	if pool == nil || st == nil || bookkeep == nil || logger == nil || m == nil {
		return nil, fail(ErrConfig, "", errors.New("pool, store, bookkeep, logger and metrics are required"))
	}
	// The pass's cursor and hot window are times compared in SQL: only on
	// sessions pinned to UTC and ISO dates do they mean one instant.
	if err := pgsession.CheckPinned(pool); err != nil {
		return nil, fail(ErrConfig, "", err)
	}
	if len(specs) == 0 {
		return nil, fail(ErrConfig, "", errors.New("no table specs"))
	}
	seen := map[string]bool{}
	for _, s := range specs {
		if s.Table == "" || s.AgeColumn == "" || s.Select == nil || s.Delete == nil {
			return nil, fail(ErrConfig, s.Table, errors.New("a table spec needs Table, AgeColumn, Select and Delete"))
		}
		if err := store.ValidateSegment("table", s.Table); err != nil {
			return nil, fail(ErrConfig, s.Table, err)
		}
		for _, sub := range s.Subjects {
			if err := sub.check(); err != nil {
				return nil, fail(ErrConfig, s.Table, err)
			}
		}
		if seen[s.Table] {
			return nil, fail(ErrConfig, s.Table, errors.New("table registered twice"))
		}
		if s.HotWindowDays != 0 && (s.HotWindowDays < MinHotWindowDays || s.HotWindowDays > MaxHotWindowDays) {
			return nil, fail(ErrConfig, s.Table, fmt.Errorf("hot window %d days outside %d..%d (0: the service's)", s.HotWindowDays, MinHotWindowDays, MaxHotWindowDays))
		}
		seen[s.Table] = true
	}
	if cfg.LockKey == 0 {
		cfg.LockKey = lease.ArchiveKey
	}
	if cfg.DBTimeout <= 0 {
		cfg.DBTimeout = DefaultDBTimeout
	}
	return &Engine{pool: pool, store: st, specs: specs, bookkeep: bookkeep, cfg: cfg, logger: logger, metrics: m, actor: SystemActor,
		orphans: intent.NewSweeper(pool, st, cfg.ObjectLock, logger, m.OrphansDestroyed)}, nil
}

func (c Config) validate(st *store.Store) error {
	switch {
	case store.ValidateSegment("service", c.Service) != nil:
		return fmt.Errorf("service %q: %w", c.Service, store.ValidateSegment("service", c.Service))
	case c.HotWindowDays < MinHotWindowDays || c.HotWindowDays > MaxHotWindowDays:
		return fmt.Errorf("hot window %d days outside %d..%d", c.HotWindowDays, MinHotWindowDays, MaxHotWindowDays)
	case c.BatchSize < MinBatchSize || c.BatchSize > MaxBatchSize:
		return fmt.Errorf("batch size %d outside %d..%d", c.BatchSize, MinBatchSize, MaxBatchSize)
	case c.MaxBatchBytes < MinMaxBatchBytes:
		return fmt.Errorf("max batch bytes %d below %d", c.MaxBatchBytes, MinMaxBatchBytes)
	case st != nil && c.MaxBatchBytes > st.MaxObjectBytes():
		return fmt.Errorf("max batch bytes %d above the store's object cap %d", c.MaxBatchBytes, st.MaxObjectBytes())
	}
	return nil
}

// WithActor returns a copy of the engine that attributes its passes to actor
// (the operator's token subject for a manual run).
func (e *Engine) WithActor(actor string) *Engine {
	c := *e
	c.actor = actor
	return &c
}

// ArchiveRef names one archive written by a pass.
type ArchiveRef struct {
	ArchiveID   uuid.UUID `json:"archive_id"`
	DataKey     string    `json:"data_key"`
	ManifestKey string    `json:"manifest_key"`
	RecordCount int       `json:"record_count"`
}

// TableReport is one table's outcome in a pass.
type TableReport struct {
	Table       string       `json:"table"`
	Archived    int64        `json:"archived"`
	Quarantined int          `json:"quarantined"`
	Archives    []ArchiveRef `json:"archives"`
	// Err is the error that stopped the table, if any.
	Err error `json:"-"`
	// Error is Err's text for the JSON report (null when none).
	Error *string `json:"error"`
}

// PassReport is the outcome of a pass.
type PassReport struct {
	// More is true when some table still had rows to archive when the
	// budget ran out. It is false for a table stopped by an error
	// (re-running into the same failure would only loop; Err says why).
	More   bool          `json:"more"`
	Tables []TableReport `json:"tables"`
}

// Table is the report of the named table (a zero report with that name
// when the engine archives no such table): a caller finds a table by name,
// never by its position among the service's tables.
func (r PassReport) Table(name string) TableReport {
	for _, t := range r.Tables {
		if t.Table == name {
			return t
		}
	}
	return TableReport{Table: name}
}

// Err joins the tables' errors.
func (r PassReport) Err() error {
	var errs []error
	for _, t := range r.Tables {
		errs = append(errs, t.Err)
	}
	return errors.Join(errs...)
}

// tableState is a table's progress within one pass.
type tableState struct {
	cursor  Cursor
	active  bool
	columns []Column
	// selected is how many rows the table's last selection returned (0:
	// nothing past its hot window after the cursor, which costs no batch).
	selected int
}

// RunPass archives up to budget batches, round-robin across the tables from
// the table after the last one the previous pass gave a batch (kept in the
// database, ADR-071), under the archive lease. A table with nothing past
// its hot window costs no batch of the budget; the report's More says
// whether some table still has such rows. It returns ErrAlreadyRunning (wrapped) when another pass
// holds the lease. Table failures are isolated: they are in the report (and
// its Err), and the other tables go on. Cancellation is checked between
// batches.
//
// Batches are pipelined two deep: while one batch is uploaded and committed
// (puts, then the delete's transaction on the lease's connection), the next
// one is selected and encoded on a connection of the pool. A batch is
// uploaded only after the one before it has landed (committed, or failed and
// stopped its table), so the store never holds more than one batch that is
// not committed, and ledger rows commit in batch order, as without the
// pipeline. When a batch fails, the batch already selected for its table is
// dropped (it was only read) and its budget goes to the other tables. The
// overlap pauses while the batch in flight holds more than half of
// MaxBatchBytes, so the two batches together stay within about one and a
// half of it.
func (e *Engine) RunPass(ctx context.Context, budget int) (PassReport, error) {
	rep := PassReport{Tables: make([]TableReport, len(e.specs))}
	for i, s := range e.specs {
		rep.Tables[i] = TableReport{Table: s.Table, Archives: []ArchiveRef{}}
	}
	if budget < 1 {
		return rep, fail(ErrConfig, "", fmt.Errorf("budget %d: must be at least 1", budget))
	}
	if err := e.cfg.Journal.Check(ctx); err != nil {
		return rep, err // a restore forgot acts: no pass until reconciled
	}
	ps := &pass{e: e, rep: &rep, states: make([]tableState, len(e.specs)), budget: budget, last: -1}
	acquired, err := lease.TryRunWithin(ctx, e.pool, e.cfg.LockKey, e.cfg.DBTimeout, func(ctx context.Context, conn *pgx.Conn) error {
		ps.conn = conn
		e.sweepOrphans(ctx) // a pass killed before its booking left them
		defer e.sweepOrphans(context.WithoutCancel(ctx))
		ps.order = e.tableOrder(ctx)
		defer ps.saveCursor(context.WithoutCancel(ctx))
		if err := ps.run(ctx); err != nil {
			return err
		}
		ps.probe(ctx)
		return nil
	})
	states := ps.states
	if err != nil && !acquired {
		return rep, fail(ErrDB, "", fmt.Errorf("archive lease: %w", err))
	}
	if !acquired {
		return rep, fail(ErrAlreadyRunning, "", errors.New("another pass holds the archive lease"))
	}
	if err != nil {
		return rep, err // cancelled between batches
	}
	rep.More = anyActive(states)
	if rep.Err() == nil {
		e.metrics.LastSuccess.WithLabelValues(e.cfg.Service).SetToCurrentTime()
	}
	e.backlog(ctx, &rep)
	e.unparsed(ctx, &rep)
	return rep, nil
}

// unparsed counts, for each table the pass did not fail that declares a
// subject field, the rows whose field holds a digit but yields no subject
// into retention_subject_unparsed_rows (one read of the hot table, bounded
// by archive.db_timeout). A read that fails is logged and left out.
func (e *Engine) unparsed(ctx context.Context, rep *PassReport) {
	for i, spec := range e.specs {
		q := UnparsedSQL(spec)
		if q == "" || rep.Tables[i].Err != nil {
			continue
		}
		dctx, cancel := e.dbStep(ctx)
		var n int64
		err := e.pool.QueryRow(dctx, q).Scan(&n)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				e.logger.WarnContext(ctx, "unparsed subjects could not be counted", slog.String("table", spec.Table), slog.Any("error", RedactRowValues(err)))
			}
			continue
		}
		e.metrics.UnparsedSubjects.WithLabelValues(spec.Table).Set(float64(n))
		if n > 0 {
			e.logger.WarnContext(ctx, "rows hold a subject spelling the canonical form does not take: no fetch, hold, seal or order reaches them",
				slog.String("table", spec.Table), slog.Int64("rows", n))
		}
	}
}

// sweepOrphans destroys, under the archive lease, the objects a pass or an
// expungement wrote and never booked (ADR-069). At a pass's end it runs
// after every flight landed, also when the pass was cancelled, so a cancel
// between an upload and its booking leaves no orphan and logs what it
// destroyed. A failure is logged: the orphans' rows are still hot, and the
// next pass sweeps again.
func (e *Engine) sweepOrphans(ctx context.Context) {
	if !e.cfg.LedgerHolds {
		return // no kernel ledger, no intents (a test's bookkeeper)
	}
	// Bounded like every database step of a pass (archive.db_timeout): a
	// database that stops answering ends the pass, sweep included, within
	// its bound; what is left is swept by the next pass.
	sctx, cancel := e.dbStep(ctx)
	defer cancel()
	if _, err := e.orphans.Sweep(sctx); err != nil && ctx.Err() == nil {
		e.logger.ErrorContext(ctx, "archive orphan sweep failed; the next pass sweeps again", slog.String("service", e.cfg.Service), slog.Any("error", err))
	}
}

// destroyUnbooked destroys, every version, the objects of a batch whose
// booking a cancel ended: that booking never commits (its COMMIT is never
// sent once a statement before it failed), but its backend may still hold
// the batch's upload intent locked (pgx closes the socket on a cancel, and
// a backend waiting on a lock does not read it), so the pass's own sweep
// would pass the intent over. The intent stays, for the sweep that settles
// it (and counts the orphan, archive_orphans_destroyed_total) (ADR-069). A
// store failure is logged: the next sweep destroys it.
func (e *Engine) destroyUnbooked(ctx context.Context, spec TableSpec, p *prepared) {
	if !e.cfg.LedgerHolds {
		return // no intents: the test bookkeeper's passes
	}
	ctx = context.WithoutCancel(ctx)
	for _, key := range []string{p.m.ManifestKey, p.m.DataKey} {
		var existed bool
		var err error
		if e.cfg.ObjectLock {
			existed, err = e.store.DestroyReleased(ctx, key)
		} else {
			existed, err = e.store.DestroyAllVersions(ctx, key)
		}
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			e.logger.ErrorContext(ctx, "an object of a cancelled booking could not be destroyed; the next orphan sweep destroys it", slog.String("key", key), slog.Any("error", err))
		case existed: // counted as an orphan by the sweep that settles its intent
			e.logger.WarnContext(ctx, "destroyed an object of a batch whose booking was cancelled", slog.String("table", spec.Table), slog.String("key", key))
		}
	}
}

// Journal is the engine's journal of acts (nil: none).
func (e *Engine) Journal() *journal.Journal { return e.cfg.Journal }

// Orphans is the engine's orphan sweeper (for the court orders and GC,
// which hold the archive lease too).
func (e *Engine) Orphans() *intent.Sweeper { return e.orphans }

// errBacklogOnly is what the backlog's policy answers if anything asked it
// to delete: it only reads.
var errBacklogOnly = errors.New("archive: the backlog reading never deletes")

// backlog reads, for each table the pass did not fail, the age of the
// oldest row still past its hot window (one index entry) into
// archive_backlog_oldest_age_seconds. A read that fails is logged and left
// out: the pass's own outcome (and its pinned report) does not depend on it.
func (e *Engine) backlog(ctx context.Context, rep *PassReport) {
	for i, spec := range e.specs {
		if rep.Tables[i].Err != nil {
			continue
		}
		p := prune.Policy{
			Declaration: prune.Declaration{Table: spec.Table, AgeColumn: spec.AgeColumn, Eligible: "TRUE",
				DeleteBatch: func(context.Context, prune.DB, prune.BatchParams) (int64, error) { return 0, errBacklogOnly }},
			Bounds: prune.Bounds{WindowDays: spec.hotWindow(e.cfg.HotWindowDays)},
		}
		dctx, cancel := e.dbStep(ctx)
		age, err := prune.OldestEligibleAge(dctx, e.pool, p)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				e.logger.WarnContext(ctx, "archive backlog could not be read", slog.String("table", spec.Table), slog.Any("error", err))
			}
			continue
		}
		e.metrics.Backlog.WithLabelValues(spec.Table).Set(age.Seconds())
	}
}

// pass is one RunPass under the archive lease: the tables' progress, the
// batch in flight and the budget left.
type pass struct {
	e        *Engine
	conn     *pgx.Conn // the lease's connection: uploads and deletes run on it
	rep      *PassReport
	states   []tableState
	inflight *flight
	budget   int
	// order is the tables' indexes in the order this pass offers them
	// batches; last is the index of the last table given one (-1: none).
	order []int
	last  int
}

// run spends the budget round-robin across the active tables.
func (p *pass) run(ctx context.Context) error {
	for i := range p.states {
		p.states[i] = tableState{cursor: Start, active: true}
	}
	defer p.land(ctx) // never leave a flight on the lease's connection
	for p.budget > 0 && anyActive(p.states) {
		for _, i := range p.order {
			if !p.states[i].active || p.budget == 0 {
				continue
			}
			if err := p.step(ctx, i, p.e.specs[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// step prepares table i's next batch while the previous batch (of any
// table) is in flight, lands that one, and puts the new one in flight. It
// returns only cancellation; table failures stop their table.
func (p *pass) step(ctx context.Context, i int, spec TableSpec) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.inflight != nil && p.inflight.p.data.Size() > p.e.cfg.MaxBatchBytes/2 {
		p.land(ctx)
		if !p.states[i].active {
			return nil
		}
	}
	p.budget--
	prep, err := p.e.prepare(ctx, i, spec, &p.states[i], &p.rep.Tables[i])
	p.land(ctx)
	if cerr := ctx.Err(); cerr != nil {
		return cerr // cancelled: the prepared (or half-read) batch is dropped, not a table failure
	}
	switch {
	case p.rep.Tables[i].Err != nil:
		p.budget++ // the table's batch in flight failed: this one is dropped unread
		return nil
	case err != nil:
		p.e.stop(ctx, spec, &p.states[i], &p.rep.Tables[i], err)
		return nil
	case prep == nil && p.states[i].selected == 0:
		p.budget++ // nothing past the hot window: an empty table costs no batch
		return nil
	case prep == nil:
		p.last = i
		return nil // nothing to archive in this batch (all quarantined)
	}
	if err := ctx.Err(); err != nil {
		return err // cancelled: the prepared batch is dropped unread
	}
	p.last = i
	p.inflight = p.e.fly(ctx, p.conn, prep)
	return nil
}

// land waits for the batch in flight, if any, and records its outcome.
func (p *pass) land(ctx context.Context) {
	if p.inflight == nil {
		return
	}
	f := p.inflight
	p.inflight = nil
	p.e.landed(ctx, f.p, <-f.done, &p.states[f.p.table], &p.rep.Tables[f.p.table])
}

// tableOrder is the tables' indexes from the one the pass cursor names
// (ADR-071); without a kernel ledger, or when the cursor cannot be read
// (logged) or names no table of the engine, from the first.
func (e *Engine) tableOrder(ctx context.Context) []int {
	start := 0
	if e.cfg.LedgerHolds {
		dctx, cancel := e.dbStep(ctx)
		names, err := queries.New(e.pool).PassCursor(dctx)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			e.logger.WarnContext(ctx, "the archive pass cursor could not be read; this pass starts at the first table", slog.Any("error", err))
		case len(names) == 1:
			for i, s := range e.specs {
				if s.Table == names[0] {
					start = i
				}
			}
		}
	}
	order := make([]int, len(e.specs))
	for k := range order {
		order[k] = (start + k) % len(e.specs)
	}
	return order
}

// saveCursor records the table after the last one the pass gave a batch
// as where the next pass starts; a pass that gave none leaves it.
func (p *pass) saveCursor(ctx context.Context) {
	if !p.e.cfg.LedgerHolds || p.last < 0 {
		return
	}
	next := p.e.specs[(p.last+1)%len(p.e.specs)].Table
	dctx, cancel := p.e.dbStep(ctx)
	defer cancel()
	if err := queries.New(p.e.pool).SetPassCursor(dctx, next); err != nil {
		p.e.logger.WarnContext(ctx, "the archive pass cursor could not be saved; the next pass starts where this one started", slog.Any("error", err))
	}
}

// probe settles, for each table still active when the budget ran out (never
// offered a batch, or its last selection full), whether a row past its hot
// window is left after its cursor: one row's selection. A table whose
// probe fails stays active (More stays true).
func (p *pass) probe(ctx context.Context) {
	for i, spec := range p.e.specs {
		st := &p.states[i]
		if !st.active || p.rep.Tables[i].Err != nil {
			continue
		}
		sctx, cancel := p.e.dbStep(ctx)
		rows, err := spec.Select(sctx, p.e.pool, SelectParams{HotWindowDays: int32(spec.hotWindow(p.e.cfg.HotWindowDays)), After: st.cursor, Limit: 1, MaxBytes: p.e.cfg.MaxBatchBytes})
		cancel()
		if err == nil && len(rows) == 0 {
			st.active = false
		}
	}
}

func anyActive(states []tableState) bool {
	for _, s := range states {
		if s.active {
			return true
		}
	}
	return false
}

// prepared is one batch selected, fitted and encoded: what its flight
// uploads, and the ids its delete removes.
type prepared struct {
	table    int
	ids      []uuid.UUID
	m        Manifest
	data     *NDJSON
	manifest []byte
	// subjects are the keyed hashes of the batch's subjects; indexed says
	// whether they are all of them (see Engine.subjectsOf). They are read
	// while the batch is encoded and uploaded (subjectsRead) and settled
	// before its rows are deleted (awaitSubjects).
	subjects     [][]byte
	indexed      bool
	subjectsRead <-chan subjectsRead
}

// subjectsRead is the outcome of reading a batch's subjects.
type subjectsRead struct {
	hashes  [][]byte
	indexed bool
	err     error
}

// readSubjects starts reading the subjects of the batch's rows ids on a
// connection of the pool, bounded by archive.db_timeout; the result
// arrives on the channel, which is never left blocking.
func (e *Engine) readSubjects(ctx context.Context, spec TableSpec, ids []uuid.UUID) <-chan subjectsRead {
	out := make(chan subjectsRead, 1)
	go func() {
		sctx, cancel := e.dbStep(ctx)
		defer cancel()
		hs, indexed, err := e.subjectsOf(sctx, spec, ids)
		switch {
		case errors.Is(err, ErrSubject):
			err = fail(ErrConfig, spec.Table, err)
		case err != nil:
			err = fail(ErrDB, spec.Table, stepErr(sctx, err))
		}
		out <- subjectsRead{hashes: hs, indexed: indexed, err: err}
	}()
	return out
}

// awaitSubjects settles the batch's subjects: the read's failure fails
// the batch before its booking, as a failed booking does (its objects,
// already put, are destroyed by the sweep of its upload intent).
func (p *prepared) awaitSubjects() error {
	if p.subjectsRead == nil {
		return nil
	}
	r := <-p.subjectsRead
	p.subjectsRead = nil
	p.subjects, p.indexed = r.hashes, r.indexed
	return r.err
}

// flight is a prepared batch being uploaded and committed in the background.
type flight struct {
	p    *prepared
	done chan error
}

// prepare selects one batch of one table on a connection of the pool, fits
// it to MaxBatchBytes and encodes its NDJSON and manifest. It leaves
// st.active true when the table may have more rows (a full selection or a
// byte-truncated batch), and returns nil when the batch has nothing to
// archive.
func (e *Engine) prepare(ctx context.Context, table int, spec TableSpec, st *tableState, tr *TableReport) (*prepared, error) {
	hot, limit := int32(spec.hotWindow(e.cfg.HotWindowDays)), int32(min(e.cfg.BatchSize, math.MaxInt32)) // both validated in New
	sctx, cancel := e.dbStep(ctx)
	defer cancel()
	rows, err := spec.Select(sctx, e.pool, SelectParams{HotWindowDays: hot, After: st.cursor, Limit: limit, MaxBytes: e.cfg.MaxBatchBytes})
	if err != nil {
		return nil, fail(ErrDB, spec.Table, fmt.Errorf("select: %w", stepErr(sctx, err)))
	}
	// More rows may follow when the selection was full or stopped at the
	// byte cap (its last row withheld: cut there, or quarantined if alone
	// above the cap; either way the next batch continues after the cursor).
	more := len(rows) > 0 && (len(rows) == int(limit) || rows[len(rows)-1].Withheld)
	st.selected = len(rows)
	included, truncated := e.fit(ctx, spec, rows, st, tr)
	st.active = more || truncated
	if len(included) == 0 {
		return nil, nil
	}
	ids := make([]uuid.UUID, len(included))
	for i, r := range included {
		ids[i] = r.ID
	}
	p := &prepared{table: table, ids: ids}
	if e.cfg.LedgerHolds { // read while the batch is encoded; the flight waits for it
		p.subjectsRead = e.readSubjects(ctx, spec, ids)
	}
	if st.columns == nil {
		if st.columns, err = TableColumns(sctx, e.pool, spec.Table); err != nil {
			return nil, fail(ErrDB, spec.Table, stepErr(sctx, err))
		}
	}
	if p.m, p.data, err = e.manifest(spec, included, st.columns); err != nil {
		return nil, err
	}
	if p.manifest, err = json.MarshalIndent(p.m, "", "  "); err != nil {
		return nil, fail(ErrConfig, spec.Table, fmt.Errorf("encode manifest: %w", err))
	}
	return p, nil
}

// fly uploads and commits a prepared batch in the background on the lease's
// connection; its outcome arrives on the flight's done channel.
func (e *Engine) fly(ctx context.Context, conn *pgx.Conn, p *prepared) *flight {
	f := &flight{p: p, done: make(chan error, 1)}
	go func() { f.done <- e.upload(ctx, conn, p) }()
	return f
}

// upload puts the data object, then the manifest (neither can overwrite
// anything), then deletes the rows and books the archive in one transaction.
func (e *Engine) upload(ctx context.Context, conn *pgx.Conn, p *prepared) error {
	spec := e.specs[p.table]
	if e.cfg.LedgerHolds { // known before written (ADR-069): the booking clears it
		ictx, cancel := e.dbStep(ctx)
		err := intent.Record(ictx, conn, intent.WorkArchive, p.m.ArchiveID, spec.Table, e.actor, p.m.DataKey, p.m.ManifestKey)
		cancel()
		if err != nil {
			return fail(ErrDB, spec.Table, stepErr(ictx, err))
		}
	}
	if err := e.store.PutCreateReaderSHA256(ctx, p.m.DataKey, p.data, p.data.Size(), store.ContentTypeNDJSON, p.m.DataSHA256); err != nil {
		return fail(ErrStore, spec.Table, fmt.Errorf("put data %s: %w", p.m.DataKey, err))
	}
	failpoint.Inject(failpoint.ArchiveAfterDataPut)
	if err := e.store.PutCreate(ctx, p.m.ManifestKey, p.manifest, store.ContentTypeJSON); err != nil {
		return fail(ErrStore, spec.Table, fmt.Errorf("put manifest %s: %w", p.m.ManifestKey, err))
	}
	failpoint.Inject(failpoint.ArchiveAfterManifestPut)
	if err := p.awaitSubjects(); err != nil {
		return err // the objects are an unbooked upload: the intent's sweep destroys them
	}
	return e.prune(ctx, conn, spec, p)
}

// landed records a flight's outcome: the archive in the report, metrics and
// log, or the failure that stops its table.
func (e *Engine) landed(ctx context.Context, p *prepared, err error, st *tableState, tr *TableReport) {
	spec := e.specs[p.table]
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
		st.active = false // the pass was cancelled under the flight: nothing landed, nothing failed
		e.destroyUnbooked(ctx, spec, p)
		return
	}
	if err != nil {
		e.stop(ctx, spec, st, tr, err)
		return
	}
	m := p.m
	tr.Archived += int64(len(p.ids))
	tr.Archives = append(tr.Archives, ArchiveRef{ArchiveID: m.ArchiveID, DataKey: m.DataKey, ManifestKey: m.ManifestKey, RecordCount: m.RecordCount})
	e.metrics.RowsArchived.WithLabelValues(spec.Table).Add(float64(len(p.ids)))
	e.logger.InfoContext(ctx, "archived rows",
		slog.String("service", e.cfg.Service), slog.String("table", spec.Table),
		slog.Int("records", m.RecordCount), slog.String("archive_id", m.ArchiveID.String()),
		slog.String("data_key", m.DataKey), slog.String("archived_by", e.actor))
}

// stop records the error that stops a table for this pass.
func (e *Engine) stop(ctx context.Context, spec TableSpec, st *tableState, tr *TableReport, err error) {
	st.active = false
	tr.Err = err
	msg := err.Error()
	tr.Error = &msg
	e.metrics.Failures.WithLabelValues(spec.Table, kindLabel(err)).Inc()
	e.logger.ErrorContext(ctx, "archive batch failed; table stopped for this pass",
		slog.String("service", e.cfg.Service), slog.String("table", spec.Table), slog.Any("error", err))
}

// fit takes rows in order while their NDJSON fits MaxBatchBytes, quarantining
// any single row that alone exceeds it. It advances the cursor past
// every row it took or quarantined; truncated is true when it stopped early.
func (e *Engine) fit(ctx context.Context, spec TableSpec, rows []Row, st *tableState, tr *TableReport) (included []Row, truncated bool) {
	var size int64
	for _, r := range rows {
		n := r.lineBytes()
		if n > e.cfg.MaxBatchBytes {
			tr.Quarantined++
			e.metrics.Quarantined.WithLabelValues(spec.Table).Inc()
			e.logger.WarnContext(ctx, "archive quarantined a row larger than max_batch_bytes; it stays in the table until an operator acts",
				slog.String("service", e.cfg.Service), slog.String("table", spec.Table), slog.String("id", r.ID.String()),
				slog.Int64("row_bytes", n), slog.Int64("max_batch_bytes", e.cfg.MaxBatchBytes))
			st.cursor = cursorAt(r)
			continue
		}
		if r.Withheld || size+n > e.cfg.MaxBatchBytes {
			return included, true
		}
		size += n
		included = append(included, r)
		st.cursor = cursorAt(r)
	}
	return included, false
}

// cursorAt is the cursor just past r.
func cursorAt(r Row) Cursor {
	key := r.Key
	if key == "" {
		key = r.At.UTC().Format("2006-01-02 15:04:05.999999Z07:00")
	}
	return Cursor{At: r.At, Key: key, ID: r.ID}
}

func (e *Engine) manifest(spec TableSpec, rows []Row, cols []Column) (Manifest, *NDJSON, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return Manifest{}, nil, fail(ErrConfig, spec.Table, fmt.Errorf("archive id: %w", err))
	}
	now := time.Now().UTC()
	keys, err := store.NewArchiveKeys(e.cfg.Service, spec.Table, now, id.String())
	if err != nil {
		return Manifest{}, nil, fail(ErrConfig, spec.Table, err)
	}
	data := NewNDJSON(rows)
	firstID, lastID, firstAt, lastAt := Range(rows)
	ident := e.store.Identity()
	return Manifest{
		Format: Format, ArchiveID: id, Service: e.cfg.Service, Table: spec.Table, RecordCount: len(rows),
		DataKey: keys.Data, ManifestKey: keys.Manifest, DataSHA256: data.SHA256Hex(),
		Endpoint: ident.Endpoint, Bucket: ident.Bucket,
		FirstRecordID: firstID, LastRecordID: lastID, FirstRecordAt: firstAt.UTC(), LastRecordAt: lastAt.UTC(),
		HotWindowDays: spec.hotWindow(e.cfg.HotWindowDays), ArchivedAt: now, ArchivedBy: e.actor,
		Columns: cols, Fingerprint: Fingerprint(cols),
	}, data, nil
}

// prune deletes the archived rows by id and runs the bookkeeping in ONE
// transaction; a count mismatch or a bookkeeping error rolls both back.
func (e *Engine) prune(ctx context.Context, conn *pgx.Conn, spec TableSpec, p *prepared) error {
	ids, m := p.ids, p.m
	ctx, cancel := e.dbStep(ctx)
	defer cancel()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fail(ErrDB, spec.Table, fmt.Errorf("begin: %w", stepErr(ctx, err)))
	}
	defer func() {
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.DBTimeout)
		defer rcancel()
		_ = tx.Rollback(rctx)
	}()
	if e.cfg.LedgerHolds { // first: a sweep that took the intent has destroyed the objects
		if err := intent.Clear(ctx, tx, m.DataKey, m.ManifestKey); err != nil {
			return fail(ErrBookkeep, spec.Table, stepErr(ctx, err))
		}
	}
	n, err := spec.Delete(ctx, tx, int32(m.HotWindowDays), ids) // the window the batch was selected by
	if err != nil {
		return fail(ErrDB, spec.Table, fmt.Errorf("delete: %w", stepErr(ctx, err)))
	}
	if n != int64(len(ids)) {
		return fail(ErrDB, spec.Table, fmt.Errorf("delete removed %d rows of the %d archived (archive %s): rolled back; its objects are destroyed as orphans", n, len(ids), m.ArchiveID))
	}
	if e.cfg.LedgerHolds { // a hold placed meanwhile commits first, or waits for this booking (lease.HoldsKey)
		if err := queries.New(tx).LockHoldsShared(ctx, lease.HoldsKey); err != nil {
			return fail(ErrDB, spec.Table, fmt.Errorf("order with holds: %w", stepErr(ctx, err)))
		}
	}
	if err := e.bookkeep(ctx, tx, m, e.actor); err != nil {
		return fail(ErrBookkeep, spec.Table, stepErr(ctx, err))
	}
	if e.cfg.LedgerHolds { // the subject index, with the ledger row it references
		if _, err := IndexSubjects(ctx, tx, m.ArchiveID, p.subjects, p.indexed); err != nil {
			return fail(ErrBookkeep, spec.Table, stepErr(ctx, err))
		}
	}
	if err := e.lockIfHeld(ctx, tx, m); err != nil {
		if errors.Is(err, ErrStore) {
			return err
		}
		return fail(ErrBookkeep, spec.Table, stepErr(ctx, err))
	}
	failpoint.Inject(failpoint.ArchiveBeforeCommit)
	if err := e.commitBooked(ctx, tx); err != nil {
		return fail(ErrDB, spec.Table, fmt.Errorf("commit: %w", err))
	}
	failpoint.Inject(failpoint.ArchiveAfterCommit)
	return nil
}

// commitBooked commits a batch's delete-and-book transaction whatever
// happens to the pass's context meanwhile, within DBTimeout: once its
// statements have run, a cancel arriving while the COMMIT is on its way
// must not leave rows archived and deleted that the pass reports as failed.
func (e *Engine) commitBooked(ctx context.Context, tx pgx.Tx) error {
	cctx, cancel := e.dbStep(context.WithoutCancel(ctx))
	defer cancel()
	return stepErr(cctx, tx.Commit(cctx))
}

// ObjectLock reports whether the engine locks archives booked under a hold.
func (e *Engine) ObjectLock() bool { return e.cfg.ObjectLock }

// dbStep bounds one database step of a pass by DBTimeout; the cause names
// the bound, so a frozen database's error says what happened.
func (e *Engine) dbStep(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, e.cfg.DBTimeout, fmt.Errorf("the database did not answer within archive.db_timeout %v", e.cfg.DBTimeout))
}

// stepErr names the bound when a step's deadline ended it.
func stepErr(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", cause, err)
	}
	return err
}

// Failure kinds of an archive batch: the label values of
// archive_failures_total{table,kind}.
const (
	FailureStore    = "store"
	FailureBookkeep = "bookkeep"
	FailureConfig   = "config"
	FailureDB       = "db"
)

// FailureKinds are every failure kind, exported from boot at 0.
func FailureKinds() []string {
	return []string{FailureStore, FailureBookkeep, FailureConfig, FailureDB}
}

func kindLabel(err error) string {
	switch {
	case errors.Is(err, ErrStore):
		return FailureStore
	case errors.Is(err, ErrBookkeep):
		return FailureBookkeep
	case errors.Is(err, ErrConfig):
		return FailureConfig
	default:
		return FailureDB
	}
}
