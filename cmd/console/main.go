// Command console serves the records officer's console (ADR-074,
// docs/console.md): configured by CRAIG_CONSOLE_* environment variables,
// it signs people in with the agency's OpenID provider and calls each
// service of the fleet file with their own token.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/craig/retention/internal/console"
)

// shutdownGrace bounds a shutdown: pages answer in seconds.
const shutdownGrace = 10 * time.Second

func main() {
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With(slog.String("service", "console"))
	if err := run(logger); err != nil {
		logger.Error("console stopped", slog.Any("error", err))
		os.Exit(1)
	}
}

func run(logger *slog.Logger) error {
	cfg, err := console.LoadConfig(os.Getenv)
	if err != nil {
		return err
	}
	c, err := console.New(cfg, logger)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Addr: cfg.Addr, Handler: c, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute,
		// A page waits at most APITimeout for its services; an approval or a
		// download at most ActTimeout.
		WriteTimeout: max(cfg.APITimeout, console.ActTimeout) + time.Minute, IdleTimeout: 2 * time.Minute}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	logger.Info("console serving", slog.String("addr", cfg.Addr), slog.String("url", cfg.PublicURL.String()), slog.Int("services", len(cfg.Services)))
	fmt.Printf("console: %s\n", cfg.PublicURL)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	logger.Info("stopped")
	return nil
}
