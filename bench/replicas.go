package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/eventsig"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/services/security"
)

// replicaCount is how many replicas of each service the replicas run
// starts side by side.
const replicaCount = 2

// replicaBudget is the batches one `rules archive run` of a replica may
// archive: small, so that the lease passes between the replicas many times
// while the aged rows last.
const replicaBudget = 5

// fleetReplicas runs two replicas of security's inbound path and two of
// rules' archiver against one database each and one store and broker, and
// checks that the work was split and nothing was done twice: every event
// booked exactly once (whichever replica consumed it), every aged row
// archived exactly once (whichever replica held the archive lease).
func (r *runner) fleetReplicas(ctx context.Context, tpl string, signer *eventsig.Signer, trustFile string) (*FleetReplicas, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*fleetDeadline)
	defer cancel()
	res := &FleetReplicas{Replicas: replicaCount, Events: r.cfg.FleetEvents}
	if err := r.securityReplicas(ctx, tpl, signer, trustFile, res); err != nil {
		return nil, fmt.Errorf("security replicas: %w", err)
	}
	if err := r.rulesReplicas(ctx, res); err != nil {
		return nil, fmt.Errorf("rules replicas: %w", err)
	}
	r.cfg.logf("replicas: security booked %v events (%d rows, %d inbox records) in %.2f s; rules archived %v rows in %v passes (lease busy %v), ledger %d archives of %d rows, %d aged rows left",
		res.SecurityBooked, res.SecurityRows, res.InboxRows, res.SecuritySeconds, res.RulesArchived, res.RulesPasses, res.RulesLeaseBusy,
		res.LedgerArchives, res.LedgerRows, res.AgedLeft)
	return res, res.check()
}

// check fails the run when the replicas did anything twice or left work
// undone.
func (res *FleetReplicas) check() error {
	var booked int64
	for _, n := range res.SecurityBooked {
		booked += n
	}
	var archived int64
	for _, n := range res.RulesArchived {
		archived += n
	}
	switch {
	case booked != int64(res.Events) || res.SecurityRows != int64(res.Events) || res.InboxRows != int64(res.Events):
		return fmt.Errorf("replicas: %d events published, booked %v (%d archive_records, %d inbox records)", res.Events, res.SecurityBooked, res.SecurityRows, res.InboxRows)
	case archived != int64(res.ArchiveRows) || res.LedgerRows != int64(res.ArchiveRows) || res.AgedLeft != 0:
		return fmt.Errorf("replicas: %d aged rows, archived %v, the ledger holds %d, %d left", res.ArchiveRows, res.RulesArchived, res.LedgerRows, res.AgedLeft)
	case res.DistinctObjects != 2*int(res.LedgerArchives):
		return fmt.Errorf("replicas: %d archives booked, %d distinct objects reported", res.LedgerArchives, res.DistinctObjects)
	}
	return nil
}

// securityReplicas publishes the fleet's signed events to one exchange
// consumed by two `security serve` replicas of one database, and reads
// each replica's archive_records_booked_total.
func (r *runner) securityReplicas(ctx context.Context, tpl string, signer *eventsig.Signer, trustFile string, res *FleetReplicas) error {
	db, err := r.srv.copyOf(ctx, tpl, "fleet_replicas", 0)
	if err != nil {
		return err
	}
	defer r.discard(db.name)
	exchange := "craig.bench.replicas." + randomSuffix()
	defer deleteFleetBroker(r.cfg.AMQPURL, exchange)
	bodies, err := fleetBodies(r.cfg.FleetEvents, signer)
	if err != nil {
		return err
	}
	serveCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	addrs := make([]string, replicaCount)
	for i := range addrs {
		addrs[i] = loopbackAddr()
		wg.Go(func() {
			app.Run(serveCtx, security.Spec(), []string{"serve"}, io.Discard, io.Discard, []string{
				"CRAIG_SECURITY__DATABASE_URL=" + db.url, "CRAIG_SECURITY__AMQP_URL=" + r.cfg.AMQPURL,
				"CRAIG_SECURITY__AMQP_EXCHANGE=" + exchange, "CRAIG_SECURITY__HTTP_ADDR=" + addrs[i],
				"CRAIG_SECURITY__EVENTS__TRUSTED_KEYS_FILE=" + trustFile, "CRAIG_SECURITY__LOG_LEVEL=error",
			})
		})
	}
	if err := waitConsumers(ctx, r.cfg.AMQPURL, app.InboundQueue(exchange, security.Spec().Name), replicaCount); err != nil {
		return err
	}
	start := time.Now()
	if err := publishAll(ctx, r.cfg.AMQPURL, exchange, bodies); err != nil {
		return err
	}
	if err := waitBooked(ctx, db.url, int64(len(bodies))); err != nil {
		return err
	}
	res.SecuritySeconds = round3(time.Since(start).Seconds())
	for _, a := range addrs {
		n, err := scrapeCounter(ctx, "http://"+a+"/metrics", "archive_records_booked_total")
		if err != nil {
			return err
		}
		res.SecurityBooked = append(res.SecurityBooked, n)
	}
	return withConn(ctx, db.url, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM archive_records), (SELECT count(*) FROM event_inbox)`).Scan(&res.SecurityRows, &res.InboxRows)
	})
}

// rulesReplicas archives a quarter of the archive scenario's aged rows
// with two replicas of rules, each running `rules archive run` passes of
// replicaBudget batches back to back until a pass reports nothing more;
// a pass that finds the lease held waits a moment and tries again.
func (r *runner) rulesReplicas(ctx context.Context, res *FleetReplicas) error {
	tg := r.rulesTarget()
	tg.name = "replicas" // its own template and copies
	rows := max(r.cfg.ArchiveRows/4, 100)
	as := archive.DefaultSettings()
	db, cleanup, err := r.replicaDatabase(ctx, tg, rows, as)
	if err != nil {
		return err
	}
	defer cleanup()
	st, err := store.Open(ctx, r.cfg.S3URL)
	if err != nil {
		return err
	}
	defer func() { _ = st.Close() }()
	res.ArchiveRows = rows
	res.RulesPasses, res.RulesArchived, res.RulesLeaseBusy = make([]int, replicaCount), make([]int64, replicaCount), make([]int, replicaCount)
	var mu sync.Mutex
	var keys []string
	var wg sync.WaitGroup
	errs := make([]error, replicaCount)
	for i := range replicaCount {
		wg.Go(func() {
			errs[i] = r.replicaPasses(ctx, tg, db.url, func(rep passReport, busy bool) {
				mu.Lock()
				defer mu.Unlock()
				if busy {
					res.RulesLeaseBusy[i]++
					return
				}
				res.RulesPasses[i]++
				for _, t := range rep.Tables {
					res.RulesArchived[i] += t.Archived
					for _, a := range t.Archives {
						keys = append(keys, a.DataKey, a.ManifestKey)
					}
				}
			})
		})
	}
	wg.Wait()
	defer func() { _ = deleteObjects(context.WithoutCancel(ctx), st, keys) }()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	distinct := map[string]bool{}
	for _, k := range keys {
		distinct[k] = true
	}
	res.DistinctObjects = len(distinct)
	return withConn(ctx, db.url, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM archive_ledger), (SELECT COALESCE(sum(record_count), 0) FROM archive_ledger),
			(SELECT count(*) FROM rule_evaluations WHERE evaluated_at < now() - make_interval(days => $1::int))`, as.HotWindowDays).
			Scan(&res.LedgerArchives, &res.LedgerRows, &res.AgedLeft)
	})
}

// replicaDatabase is a fresh database of rules holding rows aged rule
// evaluations (and a tenth as many hot ones), and its cleanup.
func (r *runner) replicaDatabase(ctx context.Context, tg archiveTarget, rows int, as archive.Settings) (scratch, func(), error) {
	saved := r.cfg.ArchiveRows
	r.cfg.ArchiveRows = rows
	tpl, err := r.archiveTemplate(ctx, tg, tg.sets, max(rows/10, 1), as)
	r.cfg.ArchiveRows = saved
	if err != nil {
		return scratch{}, nil, err
	}
	db, err := r.srv.copyOf(ctx, tpl, "archive_replicas", 0)
	if err != nil {
		r.discard(tpl)
		return scratch{}, nil, err
	}
	return db, func() { r.discard(db.name); r.discard(tpl) }, nil
}

// replicaPasses runs one replica's passes until one reports nothing more
// (or the other replica has archived everything: a pass with nothing to
// do reports more=false too).
func (r *runner) replicaPasses(ctx context.Context, tg archiveTarget, dbURL string, record func(passReport, bool)) error {
	for range 10_000 {
		cmd := exec.CommandContext(ctx, tg.binary, "archive", "run", "--json", "--budget", strconv.Itoa(replicaBudget), "--actor", archiveActor)
		cmd.Env = archiveEnv(os.Environ(), tg.service, dbURL, r.cfg.S3URL)
		var stdout bytes.Buffer
		stderr := &tailBuffer{max: 16 << 10}
		cmd.Stdout, cmd.Stderr = &stdout, stderr
		runErr := cmd.Run()
		if runErr != nil && strings.Contains(stderr.String()+stdout.String(), "holds the archive lease") {
			record(passReport{}, true)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		if runErr != nil {
			return fmt.Errorf("%s archive run: %w\n%s", tg.binary, runErr, stderr.String())
		}
		var rep passReport
		if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
			return fmt.Errorf("archive run report: %w", err)
		}
		record(rep, false)
		if !rep.More {
			return nil
		}
	}
	return errors.New("archive replicas: still more after 10,000 passes")
}

// waitConsumers waits until the queue has n consumers.
func waitConsumers(ctx context.Context, url, queue string, n int) error {
	for {
		if got, err := consumers(url, queue); err == nil && got >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fewer than %d consumers on %s: %w", n, queue, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// scrapeCounter sums a metric's series (every label set) from a Prometheus
// text endpoint (0 when it has none: nothing counted yet).
func scrapeCounter(ctx context.Context, url, metric string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric+"{") && !strings.HasPrefix(line, metric+" ") {
			continue
		}
		f, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q: %w", url, line, err)
		}
		sum += f
	}
	return int64(sum), sc.Err()
}
