package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/s3blob" // the test's bucket, written over as an incident would

	"github.com/craig/retention/build/pgadmin"
	"github.com/craig/retention/build/walkthrough"
	"github.com/craig/retention/kernel/kerneltest"
)

// Bounds of the runbook test: the demo's start (build, seed, sweep,
// archive, the fleet ledger's events), one command, the serves' stop.
const (
	runbookDemoStart   = 5 * time.Minute
	runbookCommand     = 2 * time.Minute
	runbookDemoStop    = time.Minute
	runbookRestore     = "Restore an object from the bucket's versions"
	runbookService     = "rules" // what <svc> stands for
	runbookSQLTable    = "event_outbox"
	runbookReadyMarker = "the same as KEY=value lines"
)

// TestRunbook runs `go tool mage demoUp` (its own databases, bucket and
// ports) and executes every command of docs/runbook.md against it, in
// order: each exits as the runbook says and prints what it shows. Before
// the restore section it overwrites one archive's data object and
// delete-marks another's, as an incident would, and checks after it that
// both are current again, byte for byte what the ledger says. The prose
// names no command the blocks do not run. demoUp is then stopped with
// SIGINT, and both serves log "stopped".
func TestRunbook(t *testing.T) {
	t.Parallel()
	kerneltest.NeedsServer(t, "PostgreSQL, RabbitMQ and the S3 store")
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	rb := parseRunbook(t, filepath.Join(root, "docs", "runbook.md"))
	checkProseCommands(t, rb)

	d := startDemo(t, root)
	run := &runbookRun{t: t, root: root, demo: d, work: t.TempDir(), bound: map[string]string{}}
	run.bindCase()
	copyFile(t, d.state["FLEET_FILE"], filepath.Join(run.work, "fleet.yaml"), 0o600)
	copyFile(t, filepath.Join(root, "deploy", "records-schedule", "example.yaml"), filepath.Join(run.work, "schedule.yaml"), 0o600)
	counts := map[string]int{}
	restoreDone := false
	for _, step := range rb.steps {
		if step.section == runbookRestore && !restoreDone {
			run.incident()
			restoreDone = true
		}
		if step.section != runbookRestore && restoreDone && run.incidentKeys != nil {
			run.checkRestored()
		}
		switch {
		case step.exports != nil:
			for _, name := range step.exports {
				require.Contains(t, d.state, name, "runbook.md:%d exports %s: the demo gives every variable the runbook asks for", step.line, name)
			}
			counts["environment"]++
			continue
		case step.lang == "sql":
			run.sql(step)
		default:
			run.shell(step)
		}
		counts[step.lang]++
	}
	require.True(t, restoreDone, "the runbook has its section %q", runbookRestore)
	run.checkRestored()
	t.Logf("runbook: %d shell commands and %d SQL statements executed, %d environment lines checked", counts["sh"], counts["sql"], counts["environment"])
	d.stop(t)
}

// checkProseCommands: a command the prose names in a code span is one a
// block runs (the same words, or the first words of one: a command and
// its first flags): the runbook cannot tell an operator to run what its
// test does not.
func checkProseCommands(t *testing.T, rb runbook) {
	t.Helper()
	words := func(s string) []string { return strings.Fields(strings.ReplaceAll(s, "<svc>", runbookService)) }
	for span, line := range rb.prose {
		found := false
		for _, step := range rb.steps {
			if cmd, want := words(step.command), words(span); step.lang == "sh" && len(cmd) >= len(want) && slices.Equal(cmd[:len(want)], want) {
				found = true
				break
			}
		}
		require.True(t, found, "runbook.md:%d names `%s`, which no block runs: put it in a ```sh block", line, span)
	}
}

// runbookDemo is a running `go tool mage demoUp`.
type runbookDemo struct {
	in     walkthrough.Instance
	server string
	cmd    *exec.Cmd
	out    *syncBuffer
	done   chan error
	state  map[string]string
	once   sync.Once
}

// startDemo runs demoUp in its own process group, with its own databases
// (under the test prefix), bucket, exchange and ports, and waits until it
// says its serves are up.
func startDemo(t *testing.T, root string) *runbookDemo {
	t.Helper()
	prefix, err := kerneltest.DBPrefix()
	require.NoError(t, err)
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	d := &runbookDemo{server: kerneltest.ServerURL(t), out: &syncBuffer{}, done: make(chan error, 1)}
	d.in = walkthrough.Instance{Name: prefix + "_rb" + hex.EncodeToString(suffix), StoreURL: kerneltest.S3Bucket(t),
		RulesAddr: freeAddr(t), SecurityAddr: freeAddr(t), ConsoleAddr: freeAddr(t), StateFile: filepath.Join(t.TempDir(), "demo.env")}
	t.Cleanup(func() { d.dropDatabases(t, root) })
	d.cmd = exec.Command(compileMagefile(t, root), "demoUp")
	d.cmd.Dir = root
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	d.cmd.Env = append(os.Environ(), walkthrough.EnvName+"="+d.in.Name, walkthrough.EnvStoreURL+"="+d.in.StoreURL,
		walkthrough.EnvRulesAddr+"="+d.in.RulesAddr, walkthrough.EnvSecurityAddr+"="+d.in.SecurityAddr,
		walkthrough.EnvStateFile+"="+d.in.StateFile, walkthrough.EnvConsoleAddr+"="+d.in.ConsoleAddr, "CRAIG_DEMO_SERVER_URL="+d.server)
	pr, pw := io.Pipe()
	d.cmd.Stdout, d.cmd.Stderr = pw, pw
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		signalled := false
		for sc.Scan() {
			_, _ = d.out.Write(append(sc.Bytes(), '\n'))
			if !signalled && strings.Contains(sc.Text(), runbookReadyMarker) {
				close(ready)
				signalled = true
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	require.NoError(t, d.cmd.Start())
	go func() { err := d.cmd.Wait(); _ = pw.Close(); d.done <- err }()
	t.Cleanup(func() { d.stop(t) })
	select {
	case <-ready:
	case err := <-d.done:
		d.done <- err
		t.Fatalf("demoUp exited before its serves were up (%v):\n%s", err, d.out.String())
	case <-time.After(runbookDemoStart):
		t.Fatalf("demoUp did not bring its serves up within %v:\n%s", runbookDemoStart, d.out.String())
	}
	raw, err := os.ReadFile(d.in.StateFile)
	require.NoError(t, err)
	d.state = map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		k, v, ok := strings.Cut(line, "=")
		require.True(t, ok, "demo state line %q", line)
		d.state[k] = v
	}
	return d
}

// mageBinary is the magefile compiled once per test binary (mage
// -compile): demos started in parallel each running `go tool mage` would
// otherwise each compile it, into one mage_output_file.go.
var mageBinary struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

// compileMagefile returns the compiled magefile's path (its targets run
// like `go tool mage <target>`, from root).
func compileMagefile(t *testing.T, root string) string {
	t.Helper()
	mageBinary.once.Do(func() {
		dir, err := os.MkdirTemp("", "craig-e2e-mage-")
		if err != nil {
			mageBinary.err = err
			return
		}
		mageBinary.path = filepath.Join(dir, "mage-targets")
		cmd := exec.Command("go", "tool", "mage", "-compile", mageBinary.path)
		cmd.Dir = root
		mageBinary.out, mageBinary.err = cmd.CombinedOutput()
	})
	require.NoError(t, mageBinary.err, "compile the magefile: %s", mageBinary.out)
	return mageBinary.path
}

// stop sends demoUp's group the SIGINT of a Ctrl-C and waits for it: both
// serves must log "stopped" (stopped cleanly, not killed).
func (d *runbookDemo) stop(t *testing.T) {
	t.Helper()
	d.once.Do(func() {
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGINT)
		select {
		case err := <-d.done: // the exit status of a Ctrl-C'd mage says nothing; the serves' logs do
			t.Logf("demoUp stopped on SIGINT (%v)", err)
		case <-time.After(runbookDemoStop):
			_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
			err := <-d.done
			t.Errorf("demoUp did not stop within %v of its SIGINT (%v):\n%s", runbookDemoStop, err, d.out.String())
			return
		}
		out := d.out.String()
		for _, service := range []string{"rules", "security"} {
			require.Regexp(t, regexp.MustCompile(`"msg":"stopped","service":"`+service+`"`), out, "%s serve stops cleanly on demoUp's SIGINT", service)
		}
		_, err := os.Stat(d.in.StateFile)
		require.True(t, errors.Is(err, os.ErrNotExist), "the operators' environment goes with the serves")
	})
}

// dropDatabases drops the demo's databases, one per service directory
// (whatever a failed run left).
func (d *runbookDemo) dropDatabases(t *testing.T, root string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, d.server)
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.Background()) }()
	services, err := os.ReadDir(filepath.Join(root, "services"))
	require.NoError(t, err)
	for _, s := range services {
		if !s.IsDir() {
			continue
		}
		_, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{d.in.Database(s.Name())}.Sanitize()+" WITH (FORCE)")
		require.NoError(t, err)
	}
}

// dbURL is a demo database's URL.
func (d *runbookDemo) dbURL(t *testing.T, service string) string {
	t.Helper()
	u, err := pgadmin.WithDatabase(d.server, d.in.Database(service))
	require.NoError(t, err)
	return u
}

// freeAddr is a loopback address nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// runbookRun executes the runbook's commands against a demo.
type runbookRun struct {
	t          *testing.T
	root, work string
	demo       *runbookDemo
	// bound are the placeholders' values, by "<service>/<name>" for ids
	// (a hold id of rules is not one of security) and "/<name>" for the
	// case's own (dates, the service <svc> stands for).
	bound map[string]string
	// incidentKeys are the data objects the incident wrote over, with
	// the ledger's sha256 of each.
	incidentKeys map[string]string
}

// ledgerArchive is one archive of a demo ledger.
type ledgerArchive struct {
	id, firstRecord, dataKey, sha string
}

// archives are a demo service's unpurged archives, oldest first.
func (r *runbookRun) archives(service string) []ledgerArchive {
	r.t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, r.demo.dbURL(r.t, service))
	require.NoError(r.t, err)
	defer func() { _ = conn.Close(ctx) }()
	rows, err := conn.Query(ctx, `SELECT archive_id::text, first_record_id::text, data_key, data_sha256 FROM archive_ledger WHERE purged_at IS NULL ORDER BY archived_at, archive_id`)
	require.NoError(r.t, err)
	var out []ledgerArchive
	for rows.Next() {
		var a ledgerArchive
		require.NoError(r.t, rows.Scan(&a.id, &a.firstRecord, &a.dataKey, &a.sha))
		out = append(out, a)
	}
	require.NoError(r.t, rows.Err())
	return out
}

// bindCase sets the values an operator brings: the record and the archives
// of the case (each service's oldest unpurged: the demo's disposition
// superseded one of security's), the period the demo's archives
// cover, today, the service <svc> stands for and the table of the SQL.
func (r *runbookRun) bindCase() {
	r.t.Helper()
	for _, service := range []string{"rules", "security"} {
		as := r.archives(service)
		require.NotEmpty(r.t, as, "the demo archived %s's aged rows", service)
		r.bound[service+"/archive_id"] = as[0].id
		r.bound[service+"/row_id"] = as[0].firstRecord
	}
	ctx := context.Background()
	var from, to time.Time
	for i, service := range []string{"rules", "security"} {
		conn, err := pgx.Connect(ctx, r.demo.dbURL(r.t, service))
		require.NoError(r.t, err)
		var lo, hi time.Time
		require.NoError(r.t, conn.QueryRow(ctx, `SELECT min(first_record_at), max(last_record_at) FROM archive_ledger`).Scan(&lo, &hi))
		_ = conn.Close(ctx)
		if i == 0 || lo.Before(from) {
			from = lo
		}
		if i == 0 || hi.After(to) {
			to = hi
		}
	}
	r.bound["/from"] = from.UTC().Format(time.DateOnly)
	r.bound["/to"] = to.UTC().AddDate(0, 0, 1).Format(time.DateOnly)
	r.bound["/today"] = time.Now().UTC().Format(time.DateOnly)
	r.bound["/svc"] = runbookService
	r.bound["/case"] = demoCase // seeded in both services, hot and aged
	r.bound["/table"] = runbookSQLTable
}

// serviceOf is the service a command addresses: its --service, or the one
// <svc> stands for.
var serviceFlag = regexp.MustCompile(`--service\s+([a-z]+)`)

func (r *runbookRun) serviceOf(command string) string {
	if m := serviceFlag.FindStringSubmatch(command); m != nil {
		return m[1]
	}
	return runbookService
}

// lookup is a placeholder's value for a command of service.
func (r *runbookRun) lookup(service, name string) (string, bool) {
	if v, ok := r.bound[service+"/"+name]; ok {
		return v, true
	}
	v, ok := r.bound["/"+name]
	return v, ok
}

// resolve replaces a command's placeholders with their values; one that
// nothing bound fails the test.
func (r *runbookRun) resolve(step runbookStep, service string) string {
	r.t.Helper()
	return placeholder.ReplaceAllStringFunc(step.command, func(m string) string {
		name := m[1 : len(m)-1]
		v, ok := r.lookup(service, name)
		require.True(r.t, ok, "runbook.md:%d: nothing before this command gives <%s> for %s", step.line, name, service)
		return v
	})
}

// shell runs one command with bash, in a scratch directory (go commands in
// the checkout), with the operator's environment from the demo and, for a
// service binary, the service's own; then checks its exit code and output.
func (r *runbookRun) shell(step runbookStep) {
	r.t.Helper()
	service := r.serviceOf(step.command)
	command := r.resolve(step, service)
	ctx, cancel := context.WithTimeout(context.Background(), runbookCommand)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", command)
	cmd.Dir = r.work
	if strings.HasPrefix(command, "go ") {
		cmd.Dir = r.root
	}
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(r.root, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	for k, v := range r.demo.state {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	for k, v := range r.demo.in.ArchiverEnv(runbookService, r.demo.dbURL(r.t, runbookService)) {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else {
		require.NoError(r.t, err, "runbook.md:%d: %s", step.line, command)
	}
	require.Equal(r.t, step.exit, code, "runbook.md:%d: %s exits %d, the runbook says %d:\n%s", step.line, command, code, step.exit, out.String())
	r.matchOutput(step, service, command, out.String())
}

// matchOutput checks each output line of the step against what the
// command printed, binding the placeholders it captures.
func (r *runbookRun) matchOutput(step runbookStep, service, command, out string) {
	r.t.Helper()
	lines := strings.Split(out, "\n")
	for _, want := range step.output {
		re, captures := outputPattern(want, func(name string) (string, bool) { return r.lookup(service, name) })
		var m []string
		for _, l := range lines {
			if m = re.FindStringSubmatch(l); m != nil {
				break
			}
		}
		require.NotNil(r.t, m, "runbook.md:%d: %s prints no line like %q:\n%s", step.line, command, want, out)
		for i, name := range captures {
			r.bound[service+"/"+name] = m[i+1]
		}
	}
}

// sql runs one statement of the runbook on the demo database of the
// service <svc> stands for.
func (r *runbookRun) sql(step runbookStep) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runbookCommand)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.demo.dbURL(r.t, runbookService))
	require.NoError(r.t, err)
	defer func() { _ = conn.Close(context.Background()) }()
	statement := r.resolve(step, runbookService)
	rows, err := conn.Query(ctx, statement, pgx.QueryExecModeSimpleProtocol)
	require.NoError(r.t, err, "runbook.md:%d: %s", step.line, statement)
	rows.Close()
	require.NoError(r.t, rows.Err(), "runbook.md:%d: %s", step.line, statement)
}

// incident writes over the data object of rules' oldest archive and
// delete-marks the next one's, with the bucket's own credentials.
func (r *runbookRun) incident() {
	r.t.Helper()
	as := r.archives("rules")
	require.GreaterOrEqual(r.t, len(as), 2, "the demo archives at least two batches of rules")
	ctx := context.Background()
	b, err := blob.OpenBucket(ctx, r.demo.in.StoreURL)
	require.NoError(r.t, err)
	defer func() { _ = b.Close() }()
	require.NoError(r.t, b.WriteAll(ctx, as[0].dataKey, []byte(`{"id": "`+as[0].firstRecord+`", "forged": true}`+"\n"), nil))
	require.NoError(r.t, b.Delete(ctx, as[1].dataKey))
	r.incidentKeys = map[string]string{as[0].dataKey: as[0].sha, as[1].dataKey: as[1].sha}
}

// checkRestored: after the restore section, every object the incident
// touched is current again, byte for byte what the ledger recorded.
func (r *runbookRun) checkRestored() {
	r.t.Helper()
	ctx := context.Background()
	b, err := blob.OpenBucket(ctx, r.demo.in.StoreURL)
	require.NoError(r.t, err)
	defer func() { _ = b.Close() }()
	for key, want := range r.incidentKeys {
		data, err := b.ReadAll(ctx, key)
		require.NoError(r.t, err, "%s is current again after the restore section", key)
		sum := sha256.Sum256(data)
		require.Equal(r.t, want, hex.EncodeToString(sum[:]), "%s: the current version is the ledger's", key)
	}
	r.incidentKeys = nil
}
