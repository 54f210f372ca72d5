package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/sweep"
	"github.com/craig/retention/migrations"
	"github.com/craig/retention/services/rules"
	"github.com/jackc/pgx/v5"
)

// runner holds one run's state.
type runner struct {
	cfg Config
	srv *server
	// groups are the sweep groups of the rules service at its default
	// settings (the transport group: outbox, then inbox), with the default
	// bounds applied: exactly what `rules sweep --once` runs.
	groups []sweep.Group
	// outbox is the real outbox policy of groups.
	outbox prune.Policy

	drainTemplate      string
	drainEligible      int64
	kernelDrainSeconds float64
}

// Run runs the configured scenarios and returns what they measured. It
// creates every database it uses and drops them all before it returns.
func Run(ctx context.Context, cfg Config) (res *Results, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(cfg.Scenarios) == 0 {
		cfg.Scenarios = AllScenarios
	}
	started := time.Now()
	r, err := newRunner(cfg)
	if err != nil {
		return nil, err
	}
	srv, err := newServer(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	r.srv = srv
	defer func() {
		if cerr := srv.close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("drop the run's databases: %w", cerr))
		}
	}()
	res = r.newResults(started)
	mon, err := startMonitor(ctx, srv)
	if err != nil {
		return nil, err
	}
	defer func() { res.Machine = mon.stop() }()
	cfg.logf("bench run %s on PostgreSQL %s (%d CPUs, load %.2f before the run)", srv.runID, mon.machine.Postgres, mon.machine.CPUs, mon.machine.LoadBefore)
	if err := r.runScenarios(ctx, res); err != nil {
		return res, err
	}
	res.Seconds = time.Since(started).Seconds()
	res.Summary, res.Goals = summarize(res)
	return res, nil
}

// newRunner checks the sweep policy the drain measures (the rules service's
// outbox policy at its defaults) and, for the archive, sets the local
// store's credentials when the environment names none: the harness deletes
// the pass's objects with the credentials the child uses.
func newRunner(cfg Config) (*runner, error) {
	spec := rules.Spec()
	r := &runner{cfg: cfg, groups: app.Groups(spec, spec.Defaults)}
	if len(r.groups) == 0 || len(r.groups[0].Policies) == 0 || r.groups[0].Policies[0].Table != sweep.OutboxTable {
		return nil, errors.New("the rules service's first sweep policy is not the outbox's")
	}
	r.outbox = r.groups[0].Policies[0]
	if (cfg.runs(ScenarioArchive) || cfg.runs(ScenarioSecurityArchive) || cfg.runs(ScenarioPurge) || cfg.runs(ScenarioRead) || cfg.runs(ScenarioDisposition) || cfg.runs(ScenarioScale)) && os.Getenv("AWS_ACCESS_KEY_ID") == "" && os.Getenv("AWS_SECRET_ACCESS_KEY") == "" {
		_ = os.Setenv("AWS_ACCESS_KEY_ID", localS3AccessKey)
		_ = os.Setenv("AWS_SECRET_ACCESS_KEY", localS3SecretKey)
	}
	return r, nil
}

// newResults is the run's results before any scenario: date and
// configuration.
func (r *runner) newResults(started time.Time) *Results {
	cfg, as := r.cfg, archive.DefaultSettings()
	return &Results{
		Date: started.Format("2006-01-02"), StartedAt: started.UTC().Truncate(time.Second), Smoke: cfg.Smoke,
		Config: ConfigReport{
			Rounds: cfg.Rounds, DrainRows: cfg.DrainRows, SteadyRows: cfg.SteadyRows, ArchiveRows: cfg.ArchiveRows,
			WriterRate: cfg.WriterRate, TimeBoxSeconds: cfg.TimeBox.Seconds(), Scenarios: cfg.Scenarios,
			BatchSize: int(r.outboxBatch()), WindowDays: r.outbox.WindowDays, ArchiveBatch: as.BatchSize, MaxBatchBytes: as.MaxBatchBytes,
		},
		Notes: []string{},
	}
}

// runScenarios runs the configured scenarios in order into res.
func (r *runner) runScenarios(ctx context.Context, res *Results) error {
	var err error
	if r.cfg.runs(ScenarioDrain) {
		if res.Drain, err = r.runDrain(ctx); err != nil {
			return err
		}
		for _, c := range res.Drain.Configs {
			if c.Name == cfgKernel && c.RowsPerSec > 0 {
				r.kernelDrainSeconds = float64(res.Drain.Eligible) / c.RowsPerSec
			}
		}
	}
	if r.cfg.runs(ScenarioSteady) {
		if res.Steady, err = r.runSteady(ctx); err != nil {
			return err
		}
	}
	if r.cfg.runs(ScenarioWriter) {
		if res.Writer, err = r.runWriter(ctx); err != nil {
			return err
		}
	}
	if r.drainTemplate != "" {
		r.discard(r.drainTemplate) // free its disk before the archive scenario
	}
	if r.cfg.runs(ScenarioArchive) {
		if res.Archive, err = r.runArchive(ctx, r.rulesTarget()); err != nil {
			return err
		}
	}
	if r.cfg.runs(ScenarioSecurityArchive) {
		if res.SecurityArchive, err = r.runArchive(ctx, r.securityTarget()); err != nil {
			return err
		}
	}
	if r.cfg.runs(ScenarioFleet) {
		if res.Fleet, err = r.runFleet(ctx); err != nil {
			return err
		}
	}
	if r.cfg.runs(ScenarioPurge) {
		if res.Purge, err = r.runPurge(ctx); err != nil {
			return err
		}
	}
	if r.cfg.runs(ScenarioRead) {
		if res.Read, err = r.runRead(ctx); err != nil {
			return err
		}
	}
	return r.runLaterScenarios(ctx, res)
}

// runLaterScenarios runs the scenarios after the read side: partition
// retirement, the records schedule, the outbox drain.
func (r *runner) runLaterScenarios(ctx context.Context, res *Results) error {
	var err error
	if r.cfg.runs(ScenarioPartition) {
		if res.Partition, err = r.runPartition(ctx); err != nil {
			return err
		}
	}
	if r.cfg.runs(ScenarioDisposition) {
		if res.Disposition, err = r.runDispositions(ctx); err != nil {
			return err
		}
	}
	if r.cfg.runs(ScenarioOutbox) {
		if res.Outbox, err = r.runOutbox(ctx); err != nil {
			return err
		}
	}
	if r.cfg.runs(ScenarioScale) {
		if res.Scale, err = r.runScale(ctx); err != nil {
			return err
		}
	}
	return nil
}

// outboxBatch is the kernel's batch size for the outbox.
func (r *runner) outboxBatch() int64 {
	if r.outbox.BatchSize == 0 {
		return prune.DefaultBatchSize
	}
	return int64(r.outbox.BatchSize)
}

// buildTemplate creates a database, applies sets, seeds it and leaves it
// vacuumed (frozen, analyzed): every copy starts from the same clean state.
func (r *runner) buildTemplate(ctx context.Context, name string, sets []migrations.Set, seed func(*pgx.Conn) error) error {
	start := time.Now()
	u, err := r.srv.create(ctx, name, "")
	if err != nil {
		return err
	}
	if err := migrateDB(ctx, u, sets); err != nil {
		return err
	}
	err = withConn(ctx, u, func(conn *pgx.Conn) error {
		if err := seed(conn); err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, "VACUUM (FREEZE, ANALYZE)"); err != nil {
			return fmt.Errorf("vacuum: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("template %s: %w", name, err)
	}
	r.cfg.logf("template %s ready in %s", name, time.Since(start).Round(100*time.Millisecond))
	return nil
}

func (r *runner) mustURL(name string) string {
	u, err := r.srv.dbURL(name)
	if err != nil {
		panic(err) // the server URL parsed when the run connected
	}
	return u
}

// discard drops one of the run's databases now (a measurement is done with
// it), logging a failure; close drops whatever remains.
func (r *runner) discard(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.srv.drop(ctx, name); err != nil {
		r.cfg.logf("WARN: %v", err)
	}
}

// monitor samples how busy the machine is, every second, during the run.
type monitor struct {
	machine Machine
	cancel  context.CancelFunc
	done    chan struct{}

	mu     sync.Mutex
	loads  []float64
	others []int
}

func startMonitor(ctx context.Context, srv *server) (*monitor, error) {
	m := &monitor{done: make(chan struct{})}
	m.machine.CPUs = runtime.NumCPU()
	m.machine.Go = runtime.Version()
	m.machine.MemGiB = memGiB()
	m.machine.LoadBefore = loadAvg()
	if err := srv.admin.QueryRow(ctx, "SELECT current_setting('server_version')").Scan(&m.machine.Postgres); err != nil {
		return nil, fmt.Errorf("server version: %w", err)
	}
	conn, err := pgx.Connect(ctx, srv.url)
	if err != nil {
		return nil, err
	}
	mctx, cancel := context.WithCancel(ctx)
	m.cancel = cancel
	prefix := dbPrefix + srv.runID
	go func() {
		defer close(m.done)
		defer func() { _ = conn.Close(context.Background()) }()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-mctx.Done():
				return
			case <-t.C:
			}
			var n int
			err := conn.QueryRow(mctx, otherActiveBackends, prefix).Scan(&n)
			m.mu.Lock()
			m.loads = append(m.loads, loadAvg())
			if err == nil {
				m.others = append(m.others, n)
			}
			m.mu.Unlock()
		}
	}()
	return m, nil
}

func (m *monitor) stop() Machine {
	m.cancel()
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	mc := m.machine
	var sum float64
	for _, l := range m.loads {
		sum += l
		mc.LoadMax = max(mc.LoadMax, l)
	}
	if len(m.loads) > 0 {
		mc.LoadMean = sum / float64(len(m.loads))
	}
	var osum int
	for _, n := range m.others {
		osum += n
		mc.OtherBackendsMax = max(mc.OtherBackendsMax, n)
	}
	if len(m.others) > 0 {
		mc.OtherBackendsMean = float64(osum) / float64(len(m.others))
	}
	// Busy: other sessions were active for a tenth of the samples or more,
	// or the machine was loaded before the run began.
	mc.Busy = mc.OtherBackendsMean >= 0.1 || mc.LoadBefore >= 0.5*float64(mc.CPUs)
	return mc
}

// loadAvg is the 1-minute load average (0 where /proc is missing).
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// memGiB is the machine's memory (0 where /proc is missing).
func memGiB() int {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return int((kb + 1<<19) >> 20)
		}
	}
	return 0
}
