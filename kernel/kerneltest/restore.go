package kerneltest

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// restoreTimeout bounds one pg_dump or pg_restore of a scratch database.
const restoreTimeout = 2 * time.Minute

// Backup dumps the scratch database with pg_dump (custom format) into a
// file of the test's temporary directory and returns its path: what a
// nightly backup of a service database is.
func Backup(t testing.TB, db *DB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), db.Name+".dump")
	ctx, cancel := context.WithTimeout(context.Background(), restoreTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "pg_dump", "--format=custom", "--no-owner", "--file="+path, db.URL).CombinedOutput()
	if err != nil {
		t.Fatalf("kerneltest: pg_dump %s: %v: %s", db.Name, err, out)
	}
	return path
}

// Restore restores a Backup into a new scratch database (dropped when the
// test ends) with pg_restore: the service database as it was when the
// backup was taken.
func Restore(t testing.TB, backup string) *DB {
	t.Helper()
	db := NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), restoreTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "pg_restore", "--no-owner", "--exit-on-error", "--dbname="+db.URL, backup).CombinedOutput()
	if err != nil {
		t.Fatalf("kerneltest: pg_restore %s: %v: %s", backup, err, out)
	}
	db.Pool.Reset() // its sessions saw the empty database
	return db
}
