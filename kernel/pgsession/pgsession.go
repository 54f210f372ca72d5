// Package pgsession pins the session settings every kernel connection runs
// with, so that no result depends on how a database or role is configured:
// timestamps and dates are computed and rendered in UTC, dates are ISO, and
// intervals print in PostgreSQL's own style. A database whose default zone is
// Pacific/Kiritimati (UTC+14) or whose DateStyle is "SQL, DMY" then behaves
// exactly as one in UTC: CURRENT_DATE is the UTC date, now() - interval 'N
// days' counts UTC days, and a bound read back from the catalog means the
// same instant it was written as.
package pgsession

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Pinned are the settings sent in every connection's startup packet. They
// are startup parameters (not SET statements), so they hold from the first
// statement a connection runs and survive a pool's reset; a role's or a
// database's ALTER ... SET of the same names is overridden by them.
var pinned = [...][2]string{
	{"TimeZone", "UTC"},
	{"DateStyle", "ISO, YMD"},
	{"IntervalStyle", "postgres"},
}

// Settings returns the pinned settings as name → value (a fresh map).
func Settings() map[string]string {
	m := make(map[string]string, len(pinned))
	for _, kv := range pinned {
		m[kv[0]] = kv[1]
	}
	return m
}

// Pin writes the pinned settings into cfg's startup parameters,
// overriding any the connection string carried (options=-c TimeZone=...
// included: a startup parameter set by name wins over one in options).
func Pin(cfg *pgx.ConnConfig) {
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	// PostgreSQL's setting names are case-insensitive and the last one sent
	// wins, in the random order of a Go map: a "timezone" from PGTZ or a
	// "datestyle" in the URL must not be sent beside the pinned one.
	for name := range cfg.RuntimeParams {
		for _, kv := range pinned {
			if strings.EqualFold(name, kv[0]) {
				delete(cfg.RuntimeParams, name)
			}
		}
	}
	for _, kv := range pinned {
		cfg.RuntimeParams[kv[0]] = kv[1]
	}
}

// ParsePoolConfig parses a connection string into a pool configuration
// whose connections are pinned.
func ParsePoolConfig(databaseURL string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, err
	}
	Pin(cfg.ConnConfig)
	return cfg, nil
}

// ParseConnConfig parses a connection string into a single connection's
// configuration, pinned.
func ParseConnConfig(databaseURL string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return nil, err
	}
	Pin(cfg)
	return cfg, nil
}

// NewPool opens a pool on databaseURL whose connections are pinned.
func NewPool(ctx context.Context, databaseURL string) (*pgxpool.Pool, error) {
	cfg, err := ParsePoolConfig(databaseURL)
	if err != nil {
		return nil, err
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// ErrNotPinned is returned by CheckPinned.
var ErrNotPinned = errors.New("pgsession: the pool's connections are not pinned to UTC and ISO dates (open it with pgsession or app.OpenPool)")

// CheckPinned refuses a pool whose connections are not pinned: code that
// compares times in SQL (a sweep's cutoff, an archive pass's cursor) runs
// only on pinned sessions, whatever the database's settings.
func CheckPinned(pool *pgxpool.Pool) error {
	rp := pool.Config().ConnConfig.RuntimeParams
	for _, kv := range pinned {
		for name, v := range rp {
			if strings.EqualFold(name, kv[0]) && (name != kv[0] || v != kv[1]) {
				return fmt.Errorf("%w: %s is %q", ErrNotPinned, name, v)
			}
		}
		if rp[kv[0]] != kv[1] {
			return fmt.Errorf("%w: %s is %q", ErrNotPinned, kv[0], rp[kv[0]])
		}
	}
	return nil
}
