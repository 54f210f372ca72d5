// Package replica runs a streaming replica of the test server for the replica-pacing tests.
package replica

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/craig/retention/build/workspace"

	"github.com/jackc/pgx/v5"
	"github.com/magefile/mage/mg"
)

// Replica groups the streaming replica the replica-lag tests pause.
type Replica mg.Namespace

const (
	// replicaPort is the standby's port (the primary is the test server's).
	replicaPort = 5433
	// replicaHBA lets the standby stream from the primary over loopback,
	// the trust the test server already gives every other loopback
	// connection.
	replicaHBA = "host replication all 127.0.0.1/32 trust"
	// replicaWait bounds the standby's start and its first streaming.
	replicaWait = 2 * time.Minute
	// replicaSlot is the physical replication slot the standby streams
	// from: the primary keeps every WAL segment the standby has not
	// received, from the base backup on (without one, WAL written while
	// the backup ran or the standby started could be recycled first:
	// "requested WAL segment has already been removed"). replica:down
	// drops it, so it never keeps WAL for a standby that is gone.
	replicaSlot = "craig_retention_replica"
	// slotReleaseWait bounds the wait for a stopped standby's walsender to
	// let go of the slot.
	slotReleaseWait = 10 * time.Second
)

// replicaHBALine matches a pg_hba.conf line that already allows it.
var replicaHBALine = regexp.MustCompile(`(?m)^\s*host\s+replication\s+all\s+127\.0\.0\.1/32\s+trust\s*$`)

// Up makes a streaming replica of the test server (pg_basebackup -R, streaming from the physical replication slot craig_retention_replica) in a temporary directory and starts it on 127.0.0.1:5433 (adds a loopback replication trust line to the primary's pg_hba.conf first); a no-op when it streams.
func (Replica) Up(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, replicaWait)
	defer cancel()
	primary := workspace.EnvOr("CRAIG_TEST_DATABASE_URL", workspace.DefaultServerURL)
	if streaming(ctx, primary) {
		fmt.Printf("replica is up: a standby streams from the test server (127.0.0.1:%d)\n", replicaPort)
		return nil
	}
	conn, err := pgx.Connect(ctx, primary)
	if err != nil {
		return fmt.Errorf("replica: the primary: %w", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var hba, version string
	if err := conn.QueryRow(ctx, "SELECT current_setting('hba_file'), (current_setting('server_version_num')::int / 10000)::text").Scan(&hba, &version); err != nil {
		return fmt.Errorf("replica: read the primary's settings: %w", err)
	}
	if err := allowReplication(ctx, conn, hba); err != nil {
		return err
	}
	bin := filepath.Join("/usr/lib/postgresql", version, "bin")
	dir := filepath.Join(os.TempDir(), "craig-retention-replica")
	start := time.Now()
	if err := makeStandby(ctx, conn, bin, dir); err != nil {
		return err
	}
	for !streaming(ctx, primary) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("replica: started but not streaming within %s (log %s): %w", replicaWait, filepath.Join(dir, "replica.log"), ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	fmt.Printf("replica is up: standby on 127.0.0.1:%d streaming from the test server in %s (data %s)\n", replicaPort, time.Since(start).Round(time.Millisecond), dir)
	return nil
}

// makeStandby replaces dir with a base backup of the primary configured as
// its standby (-R) and starts it.
func makeStandby(ctx context.Context, conn *pgx.Conn, bin, dir string) error {
	_ = asPostgres(ctx, filepath.Join(bin, "pg_ctl"), "-D", dir, "-m", "immediate", "stop") // a stale one
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("replica: remove %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("replica: %w", err)
	}
	if err := chownPostgres(dir); err != nil {
		return err
	}
	if err := dropSlot(ctx, conn); err != nil { // a standby's that is gone
		return err
	}
	if err := asPostgres(ctx, filepath.Join(bin, "pg_basebackup"), "-h", "127.0.0.1", "-p", "5432", "-U", "postgres",
		"-D", dir, "-R", "-X", "stream", "-c", "fast", "-C", "-S", replicaSlot); err != nil {
		return fmt.Errorf("replica: pg_basebackup: %w", err)
	}
	// A standby refuses to replay with lower limits than its primary's.
	var limits string
	if err := conn.QueryRow(ctx, `SELECT string_agg(name || ' = ' || setting, E'\n' ORDER BY name) FROM pg_settings
		WHERE name IN ('max_connections', 'max_worker_processes', 'max_wal_senders', 'max_prepared_transactions', 'max_locks_per_transaction')`).Scan(&limits); err != nil {
		return fmt.Errorf("replica: read the primary's limits: %w", err)
	}
	if err := writeStandbyConfig(dir, limits); err != nil {
		return err
	}
	if err := asPostgres(ctx, filepath.Join(bin, "pg_ctl"), "-D", dir, "-l", filepath.Join(dir, "replica.log"), "-w", "-t", "60", "start"); err != nil {
		return fmt.Errorf("replica: start (log %s): %w", filepath.Join(dir, "replica.log"), err)
	}
	return nil
}

// Down stops the standby replica:up started and drops its replication slot on the primary (craig_retention_replica: it would keep every WAL segment from then on); a no-op when neither is there.
func (Replica) Down(ctx context.Context) error {
	dir := filepath.Join(os.TempDir(), "craig-retention-replica")
	if _, err := os.Stat(filepath.Join(dir, "postmaster.pid")); err == nil {
		bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
		if len(bins) == 0 {
			return errors.New("replica: no pg_ctl under /usr/lib/postgresql")
		}
		if err := asPostgres(ctx, bins[len(bins)-1], "-D", dir, "-m", "fast", "stop"); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, replicaWait)
	defer cancel()
	conn, err := pgx.Connect(ctx, workspace.EnvOr("CRAIG_TEST_DATABASE_URL", workspace.DefaultServerURL))
	if err != nil {
		return fmt.Errorf("replica: the primary: %w", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	return dropSlot(ctx, conn)
}

// dropSlot drops the standby's replication slot on the primary, once no
// walsender holds it (a stopped standby's lets go within moments); none is
// no error.
func dropSlot(ctx context.Context, conn *pgx.Conn) error {
	deadline := time.Now().Add(slotReleaseWait)
	for {
		var exists, active bool
		err := conn.QueryRow(ctx, "SELECT count(*) > 0, coalesce(bool_or(active), false) FROM pg_replication_slots WHERE slot_name = $1", replicaSlot).Scan(&exists, &active)
		switch {
		case err != nil:
			return fmt.Errorf("replica: read the slot %s: %w", replicaSlot, err)
		case !exists:
			return nil
		case !active:
			if _, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", replicaSlot); err != nil {
				return fmt.Errorf("replica: drop the slot %s: %w", replicaSlot, err)
			}
			fmt.Printf("replica: dropped the replication slot %s\n", replicaSlot)
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("replica: the slot %s is still in use after %s (a standby streams from it)", replicaSlot, slotReleaseWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// streaming reports whether the standby answers on its port, is in
// recovery, and the primary has a walsender streaming to it.
func streaming(ctx context.Context, primary string) bool {
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=5", replicaPort))
	if err != nil {
		return false
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var standby bool
	if conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&standby) != nil || !standby {
		return false
	}
	p, err := pgx.Connect(ctx, primary)
	if err != nil {
		return false
	}
	defer func() { _ = p.Close(context.Background()) }()
	var n int
	return p.QueryRow(ctx, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'").Scan(&n) == nil && n > 0
}

// allowReplication appends replicaHBA to the primary's pg_hba.conf when no
// line allows it yet, and reloads the primary's configuration.
func allowReplication(ctx context.Context, conn *pgx.Conn, hba string) error {
	raw, err := os.ReadFile(hba)
	if err != nil {
		return fmt.Errorf("replica: read %s (the primary's pg_hba.conf; run as root or postgres): %w", hba, err)
	}
	if replicaHBALine.Match(raw) {
		return nil
	}
	text := string(raw)
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	text += "# craig-retention replica:up: the test standby streams over loopback\n" + replicaHBA + "\n"
	if err := os.WriteFile(hba, []byte(text), 0o640); err != nil {
		return fmt.Errorf("replica: write %s: %w", hba, err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("replica: reload the primary's configuration: %w", err)
	}
	fmt.Printf("replica: %s now allows loopback replication (%q)\n", hba, replicaHBA)
	return nil
}

// asPostgres runs a PostgreSQL tool as the postgres user (runuser when this
// is root; directly when this already is postgres).
func asPostgres(ctx context.Context, tool string, args ...string) error {
	me, err := user.Current()
	if err != nil {
		return err
	}
	var cmd *exec.Cmd
	switch me.Username {
	case "postgres":
		cmd = exec.CommandContext(ctx, tool, args...)
	case "root":
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", "postgres", "--", tool}, args...)...)
	default:
		return fmt.Errorf("replica: %s must run as root or postgres, not %s", filepath.Base(tool), me.Username)
	}
	cmd.Dir = os.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", filepath.Base(tool), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// writeStandbyConfig writes the standby's own configuration files into its
// data directory (Debian keeps the primary's under /etc, which
// pg_basebackup does not copy): its port, loopback only, the primary's
// limits, and trust for local connections, as the test server has.
func writeStandbyConfig(dir, limits string) error {
	files := map[string]string{
		"postgresql.conf": fmt.Sprintf("# craig-retention replica:up: the test standby\nport = %d\nlisten_addresses = '127.0.0.1'\n"+
			"unix_socket_directories = '%s'\nhot_standby = on\nshared_buffers = 32MB\n%s\n", replicaPort, dir, limits),
		"pg_hba.conf":   "local all all trust\nhost all all 127.0.0.1/32 trust\n",
		"pg_ident.conf": "",
	}
	for name, text := range files {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			return fmt.Errorf("replica: %w", err)
		}
		if err := chownPostgres(path); err != nil {
			return err
		}
	}
	return nil
}

// chownPostgres gives dir to the postgres user (a data directory must be
// its owner's, mode 0700).
func chownPostgres(dir string) error {
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("replica: %w", err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return err
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return err
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return fmt.Errorf("replica: chown %s: %w", dir, err)
	}
	return nil
}
