package kerneltest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"
)

// containerImage is the PostgreSQL major version the services target.
const containerImage = "postgres:15-alpine"

// containerURL starts (once per test process) a PostgreSQL container when a
// Docker engine is reachable, and returns its admin URL. The container is
// reaped by testcontainers' Ryuk when the process exits.
func containerURL() (string, error) {
	container.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		provider, err := testcontainers.NewDockerProvider()
		if err != nil {
			container.err = fmt.Errorf("no docker provider: %w", err)
			return
		}
		defer func() { _ = provider.Close() }()
		if err := provider.Health(ctx); err != nil {
			container.err = fmt.Errorf("no docker engine: %w", err)
			return
		}
		c, err := tcpostgres.Run(ctx, containerImage,
			tcpostgres.WithUsername("postgres"),
			tcpostgres.WithPassword("postgres"),
			tcpostgres.WithDatabase("postgres"),
			testcontainers.WithWaitStrategy(wait.ForLog("database system is ready to accept connections").
				WithOccurrence(2).WithStartupTimeout(2*time.Minute)),
		)
		if err != nil {
			container.err = fmt.Errorf("start postgres container: %w", err)
			return
		}
		container.url, container.err = c.ConnectionString(ctx, "sslmode=disable")
	})
	if container.url == "" && container.err == nil {
		return "", errors.New("postgres container: no url")
	}
	return container.url, container.err
}
