// Package pgadmin creates, drops and probes databases on a PostgreSQL server for the build targets.
package pgadmin

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/craig/retention/build/workspace"

	"github.com/craig/retention/kernel/settings"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// WithAdmin connects to the admin database of the server dbURL names.
func WithAdmin(ctx context.Context, dbURL string, fn func(conn *pgx.Conn, database string) error) error {
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		return fmt.Errorf("parse database url %s: %w", settings.Redact(dbURL), err)
	}
	database := cfg.Database
	cfg.Database = workspace.AdminDatabase
	cctx, cancel := context.WithTimeout(ctx, workspace.DialTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cfg)
	if err != nil {
		return fmt.Errorf("connect to %s on %s:%d: %w", workspace.AdminDatabase, cfg.Host, cfg.Port, err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	return fn(conn, database)
}

func DatabaseExists(ctx context.Context, dbURL string) (bool, error) {
	var exists bool
	err := WithAdmin(ctx, dbURL, func(conn *pgx.Conn, database string) error {
		return conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", database).Scan(&exists)
	})
	if err != nil {
		return false, fmt.Errorf("look up database: %w", err)
	}
	return exists, nil
}

// EnsureDatabase creates the database dbURL names if it does not exist.
func EnsureDatabase(ctx context.Context, dbURL string) error {
	return WithAdmin(ctx, dbURL, func(conn *pgx.Conn, database string) error {
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", database).Scan(&exists); err != nil {
			return fmt.Errorf("look up database %s: %w", database, err)
		}
		if exists {
			return nil
		}
		_, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{database}.Sanitize())
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database: created concurrently
			return nil
		}
		if err != nil {
			return fmt.Errorf("create database %s: %w", database, err)
		}
		fmt.Println("created database", database)
		return nil
	})
}

// RecreateDatabase drops (disconnecting its sessions) and creates the database dbURL names.
func RecreateDatabase(ctx context.Context, dbURL string) error {
	return WithAdmin(ctx, dbURL, func(conn *pgx.Conn, database string) error {
		ident := pgx.Identifier{database}.Sanitize()
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop database %s: %w", database, err)
		}
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
			return fmt.Errorf("create database %s: %w", database, err)
		}
		return nil
	})
}

// WithDatabase returns the server URL with its database replaced.
func WithDatabase(serverURL, database string) (string, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", fmt.Errorf("parse server url: %w", err)
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return "", fmt.Errorf("server url %s must be a postgres:// URL", settings.Redact(serverURL))
	}
	u.Path = "/" + database
	return u.String(), nil
}
