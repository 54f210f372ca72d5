package workspace

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/magefile/mage/mg"
	"github.com/magefile/mage/sh"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/settings"
)

const (
	// DefaultServerURL is the local PostgreSQL server (any database on it).
	DefaultServerURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	// DefaultAMQPURL is the local RabbitMQ broker.
	DefaultAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"
	// AdminDatabase is the database connected to for CREATE/DROP DATABASE.
	AdminDatabase = "postgres"
	// DialTimeout bounds every server probe and admin connection.
	DialTimeout = 5 * time.Second
)

// EachModule runs `go <verb> [-tags <tags>] <flags> ./...` in every workspace
// module that has packages, printing output live, and joins the failures
// after running them all.
func EachModule(verb, tags string, flags ...string) error {
	mods, err := Modules()
	if err != nil {
		return err
	}
	return InModules(mods, verb, tags, flags...)
}

// InModules runs `go <verb> [-tags <tags>] <flags> ./...` in each module
// directory given (EachModule's loop).
func InModules(mods []string, verb, tags string, flags ...string) error {
	args := []string{verb}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	args = append(append(args, flags...), "./...")
	var errs []error
	for _, dir := range mods {
		ok, err := hasPackages(dir, tags)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok {
			fmt.Printf("==> go %s: no packages in %s, skipped\n", verb, RelPath(dir))
			continue
		}
		fmt.Printf("==> go %s (%s)\n", strings.Join(args, " "), RelPath(dir))
		if err := GoIn(dir, args...); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", RelPath(dir), err))
		}
	}
	return errors.Join(errs...)
}

// hasPackages reports whether the module in dir has any package under the
// build tags (go test and go vet fail on a module that has none, such as a module
// whose only Go file carries a build tag). Broken packages still
// count (-e): the real command reports them.
func hasPackages(dir, tags string) (bool, error) {
	var out bytes.Buffer
	_, err := sh.Exec(nil, &out, io.Discard, mg.GoCmd(), "-C", dir, "list", "-e", "-tags="+tags, "./...")
	if err != nil {
		return false, fmt.Errorf("go list in %s: %w", RelPath(dir), err)
	}
	return strings.TrimSpace(out.String()) != "", nil
}

// DatabaseURL is CRAIG_<SERVICE>__DATABASE_URL or the local craig_<service>.
func DatabaseURL(service string) string {
	return EnvOr(DatabaseEnv(service), app.DefaultDatabaseURL(service))
}

func DatabaseEnv(service string) string {
	return settings.EnvVar(service, "database_url")
}

// Binary is the path of a program Build compiles (bin/<name>).
func Binary(name string) string { return filepath.Join("bin", name) }

// ServiceBinary is the path of a service's binary once Build has run.
func ServiceBinary(service string) string { return Binary(service) }
