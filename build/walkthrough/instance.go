package walkthrough

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/craig/retention/build/versitygw"
	"github.com/craig/retention/build/workspace"
	"github.com/craig/retention/kernel/settings"
)

// The environment that names a demo other than the default one (a test runs
// its own: scratch databases, its own bucket, free ports).
const (
	// EnvName prefixes the demo's databases (<name>_<service>) and names its
	// exchange (craig_demo: craig_demo_rules, craig.demo.events).
	EnvName = "CRAIG_DEMO_NAME"
	// EnvStoreURL is the store the demo's archivers write to (a bucket with
	// S3 Object Lock); by default store:up's bucket.
	EnvStoreURL = "CRAIG_DEMO_STORE_URL"
	// EnvRulesAddr and EnvSecurityAddr are where demoUp's serves listen.
	EnvRulesAddr    = "CRAIG_DEMO_RULES_ADDR"
	EnvSecurityAddr = "CRAIG_DEMO_SECURITY_ADDR"
	// EnvStateFile is where demoUp writes the operator's environment
	// (KEY=value lines: the service URLs, both operators' tokens, the
	// fleet file) while its serves run; removed when they stop.
	EnvStateFile = "CRAIG_DEMO_STATE_FILE"
	// EnvConsoleAddr is where demoUp's records console listens.
	EnvConsoleAddr = "CRAIG_DEMO_CONSOLE_ADDR"
)

// Defaults of the demo everyone runs by hand.
const (
	defaultName         = "craig_demo"
	defaultRulesAddr    = "127.0.0.1:18083"
	defaultSecurityAddr = "127.0.0.1:18084"
	defaultConsoleAddr  = "127.0.0.1:18090"
)

// demoName is a database prefix PostgreSQL takes unquoted.
var demoName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,39}$`)

// Instance is one demo: its databases, exchange, store and addresses.
type Instance struct {
	Name                    string
	StoreURL                string
	RulesAddr, SecurityAddr string
	ConsoleAddr             string
	StateFile               string
}

// InstanceFromEnv is the demo the environment names (the default one when
// nothing is set).
func InstanceFromEnv() (Instance, error) {
	in := Instance{
		Name:         workspace.EnvOr(EnvName, defaultName),
		StoreURL:     workspace.EnvOr(EnvStoreURL, versitygw.BucketURL()),
		RulesAddr:    workspace.EnvOr(EnvRulesAddr, defaultRulesAddr),
		SecurityAddr: workspace.EnvOr(EnvSecurityAddr, defaultSecurityAddr),
		ConsoleAddr:  workspace.EnvOr(EnvConsoleAddr, defaultConsoleAddr),
		StateFile:    os.Getenv(EnvStateFile),
	}
	if !demoName.MatchString(in.Name) {
		return Instance{}, fmt.Errorf("%s=%q: want a lowercase name of letters, digits and _ (at most 40), such as craig_demo", EnvName, in.Name)
	}
	return in, nil
}

// Database is the demo database of a service.
func (in Instance) Database(service string) string { return in.Name + "_" + service }

// Exchange is the AMQP exchange the demo's serves share.
func (in Instance) Exchange() string { return strings.ReplaceAll(in.Name, "_", ".") + ".events" }

// ArchiverEnv is a service's environment with its archiver on, writing to
// the demo's store.
func (in Instance) ArchiverEnv(service, dbURL string) map[string]string {
	env := versitygw.ArchiverEnv(service, dbURL, in.StoreURL)
	if key, err := in.SubjectKeyFile(); err == nil {
		env[settings.EnvVar(service, "archive.subject_key_file")] = key
	} else {
		fmt.Printf("WARNING: no subject key for the demo (%v): archives are booked without their subject index\n", err)
	}
	return env
}

// SubjectKeyFile is the demo's subject key (archive.subject_key_file),
// one for both services as a fleet shares one: beside the state file when
// there is one, else in the user's cache; made (32 random bytes, hex) the
// first time.
func (in Instance) SubjectKeyFile() (string, error) {
	dir := filepath.Dir(in.StateFile)
	if in.StateFile == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(cache, "craig-retention", "demo", in.Name)
	}
	path := filepath.Join(dir, "subject.key")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return "", err
	}
	return path, os.WriteFile(path, []byte(hex.EncodeToString(secret)+"\n"), 0o600)
}
