// Package walkthrough is the demo's second half: rules' and security's
// serves with their archive APIs and signed fleet events, and a craigctl
// session against them (the runbook's walk-through).
package walkthrough

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/craig/retention/build/pgadmin"
	"github.com/craig/retention/build/workspace"

	"github.com/craig/retention/kernel/eventsig"
	"github.com/craig/retention/kernel/settings"
	"github.com/jackc/pgx/v5"
)

// demoFleetWait is how long the demo waits for rules' events to be booked
// in security's fleet ledger.
const demoFleetWait = time.Minute

// Run is the fleet part of the demo: it generates the producers' event
// keys, runs security's and rules' serve (signed, trust configured) with
// their archive APIs until rules' archive events are booked in security's
// fleet ledger, prints archive_records, then runs a craigctl session against
// them; with keep, it leaves them serving until interrupted.
func Run(ctx context.Context, server string, in Instance, keep bool) error {
	dir, err := os.MkdirTemp("", "craig-demo-keys-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	trust, err := demoKeys(dir)
	if err != nil {
		return err
	}
	idp, err := startIdP(dir)
	if err != nil {
		return err
	}
	defer idp.close()
	secURL, err := pgadmin.WithDatabase(server, in.Database("security"))
	if err != nil {
		return err
	}
	rulesURL, err := pgadmin.WithDatabase(server, in.Database("rules"))
	if err != nil {
		return err
	}
	fmt.Printf("\n==> event keys generated in %s; security trusts %s\n", dir, strings.Join(trust, ", "))
	sec, err := demoServe(in, "security", secURL, in.SecurityAddr, dir)
	if err != nil {
		return err
	}
	defer sec.stop()
	rules, err := demoServe(in, "rules", rulesURL, in.RulesAddr, dir)
	if err != nil {
		return err
	}
	defer rules.stop()
	if err := bookedFleet(ctx, secURL, rulesURL); err != nil {
		return err
	}
	pids := fmt.Sprintf("RULES_PID=%d\nSECURITY_PID=%d\n", rules.cmd.Process.Pid, sec.cmd.Process.Pid)
	if err := demoCraigctl(ctx, in, idp, rulesURL, dir, pids, keep); err != nil {
		return err
	}
	rules.stop()
	sec.stop()
	return nil
}

// bookedFleet waits until security's fleet ledger has booked every archive
// of rules, then prints it.
func bookedFleet(ctx context.Context, secURL, rulesURL string) error {
	conn, err := pgx.Connect(ctx, secURL)
	if err != nil {
		return fmt.Errorf("connect %s: %w", settings.Redact(secURL), err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	want, err := rulesArchives(ctx, rulesURL)
	if err != nil {
		return err
	}
	if err := waitFleet(ctx, conn, want); err != nil {
		return err
	}
	return printFleet(ctx, conn)
}

// demoKeys writes each producer's private key and security's trust file;
// it returns the trusted key ids.
func demoKeys(dir string) ([]string, error) {
	var lines, ids []string
	for _, service := range []string{"rules", "security"} {
		id := service + "-demo"
		priv, line, err := eventsig.GeneratePEM(id, "craig-"+service)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, id+".pem"), priv, 0o600); err != nil {
			return nil, err
		}
		lines, ids = append(lines, line), append(ids, id)
	}
	return ids, os.WriteFile(filepath.Join(dir, "trusted"), []byte(strings.Join(lines, "\n")+"\n"), 0o600)
}

// demoProcess is a serve child process.
type demoProcess struct {
	name string
	cmd  *exec.Cmd
	done chan error
}

// demoServe starts `<service> serve` signing its events and trusting the
// demo keys; rules' purges need a second operator's approval (dual
// control), security's execute at once.
func demoServe(in Instance, service, dbURL, addr, keyDir string) (*demoProcess, error) {
	bin := workspace.ServiceBinary(service)
	e := func(k, v string) string { return settings.EnvVar(service, k) + "=" + v }
	// Not CommandContext: a cancelled mage (Ctrl-C) would SIGKILL the
	// serve. The serve runs in a process group of its own, so a terminal's
	// SIGINT reaches only mage, and stop asks it to shut down (it logs
	// "stopped").
	cmd := exec.Command(bin, "serve")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(os.Environ(), e("database_url", dbURL), e("http_addr", addr), e("amqp_exchange", in.Exchange()),
		e("events.signing_key_file", filepath.Join(keyDir, service+"-demo.pem")), e("events.signing_key_id", service+"-demo"),
		e("events.trusted_keys_file", filepath.Join(keyDir, "trusted")),
		// The archive API, for craigctl; the archiver serves it, its scheduled passes stay off.
		e("auth.jwks_file", filepath.Join(keyDir, idpJWKSFile)), e("auth.issuer", readIssuer(keyDir)), e("auth.audience", demoAudience),
		e("archive.interval_seconds", "0"))
	if service == "rules" {
		cmd.Env = append(cmd.Env, e("archive.purge.approvals_required", "1"))
	}
	for k, v := range in.ArchiverEnv(service, dbURL) {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stderr = os.Stderr
	fmt.Printf("==> %s serve (http %s, exchange %s, signed)\n", bin, addr, in.Exchange())
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s serve: %w", bin, err)
	}
	p := &demoProcess{name: bin, cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	return p, nil
}

// stop asks the process to shut down (SIGTERM) and waits for it (30 s,
// then SIGKILL); a second call does nothing.
func (p *demoProcess) stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case err = <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		err = <-p.done
	}
	if err != nil {
		fmt.Printf("%s serve: %v\n", p.name, err)
	}
	p.cmd = nil
}

// rulesArchives counts rules' local ledger rows: the events security must
// book.
func rulesArchives(ctx context.Context, dbURL string) (int64, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, fmt.Errorf("connect %s: %w", settings.Redact(dbURL), err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var n int64
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM archive_ledger`).Scan(&n); err != nil {
		return 0, fmt.Errorf("read rules' archive_ledger: %w", err)
	}
	return n, nil
}

// waitFleet waits until security's fleet ledger holds want craig-rules rows.
func waitFleet(ctx context.Context, conn *pgx.Conn, want int64) error {
	deadline := time.Now().Add(demoFleetWait)
	for time.Now().Before(deadline) {
		var n int64
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM archive_records WHERE source_service = 'craig-rules'`).Scan(&n); err != nil {
			return fmt.Errorf("read archive_records: %w", err)
		}
		if n >= want {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("rules' %d archive events did not all reach security's fleet ledger within a minute (is RabbitMQ up?)", want)
}

// printFleet prints security's archive_records.
func printFleet(ctx context.Context, conn *pgx.Conn) error {
	rows, err := conn.Query(ctx, `SELECT source_service, table_name, archive_id::text, record_count, archived_by, legal_hold,
		coalesce(retention_until::text, '-') FROM archive_records ORDER BY source_service, archived_at, archive_id`)
	if err != nil {
		return fmt.Errorf("read archive_records: %w", err)
	}
	defer rows.Close()
	fmt.Println("\nsecurity archive_records (the fleet ledger):")
	fmt.Println("| source_service | table | archive_id | records | archived_by | legal_hold | retention_until |")
	fmt.Println("|---|---|---|---:|---|---|---|")
	for rows.Next() {
		var src, table, id, by, until string
		var n int
		var hold bool
		if err := rows.Scan(&src, &table, &id, &n, &by, &hold, &until); err != nil {
			return fmt.Errorf("read archive_records: %w", err)
		}
		fmt.Printf("| %s | %s | %s | %d | %s | %v | %s |\n", src, table, id, n, by, hold, until)
	}
	return rows.Err()
}
