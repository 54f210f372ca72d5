package walkthrough

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/craig/retention/build/workspace"
	"github.com/craig/retention/kernel/loopbackidp"
)

// The demo's identity: a loopback OpenID provider (ADR-074) whose keys the
// serves verify (auth.jwks_file), the console's client id, and the
// audience of its access tokens.
const (
	idpJWKSFile     = "idp.jwks"
	idpIssuerFile   = "idp.issuer"
	demoAudience    = "craig-archive"
	consoleClientID = "craig-console"
)

// The demo's two people at the console: a records officer and agency
// counsel, with the scopes of their roles.
var demoPeople = []loopbackidp.Person{
	{Subject: "officer@agency.example", Name: "Olivia Officer", Role: "records-officer",
		Scopes: []string{"archive:read", "archive:hold", "archive:seal", "archive:purge", "records:review", "records:events", "records:schedule"}},
	{Subject: "counsel@agency.example", Name: "Carl Counsel", Role: "counsel",
		Scopes: []string{"archive:read", "archive:hold", "archive:purge", "archive:sealed-read", "records:review", "records:schedule"}},
}

// demoIdP is the running provider.
type demoIdP struct{ p *loopbackidp.Provider }

// startIdP starts the provider on a free loopback port and writes its JWKS
// and issuer beside the demo's keys.
func startIdP(dir string) (*demoIdP, error) {
	p, err := loopbackidp.Start("127.0.0.1:0", demoAudience, demoPeople, nil)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, idpJWKSFile), p.JWKS(), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, idpIssuerFile), []byte(p.Issuer()), 0o600); err != nil {
		return nil, err
	}
	fmt.Printf("==> identity provider (loopback, demo only) at %s\n", p.Issuer())
	return &demoIdP{p: p}, nil
}

func (d *demoIdP) close() { _ = d.p.Close() }

// mint is a craigctl operator's token (demoScopes, demoTokenTTL).
func (d *demoIdP) mint(sub string) (string, error) {
	return d.p.Mint(sub, strings.Fields(demoScopes), demoTokenTTL)
}

func readIssuer(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, idpIssuerFile))
	return string(b)
}

// demoConsole starts bin/console on the demo's console address over the
// fleet file, signed in through the demo's provider.
func demoConsole(in Instance, idp *demoIdP, fleet string) (*demoProcess, error) {
	base := "http://" + in.ConsoleAddr
	idp.p.AddClient(loopbackidp.Client{ID: consoleClientID, RedirectURIs: []string{base + "/auth/callback"}})
	bin := workspace.Binary("console")
	cmd := exec.Command(bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(os.Environ(), "CRAIG_CONSOLE_ADDR="+in.ConsoleAddr, "CRAIG_CONSOLE_OIDC_ISSUER="+idp.p.Issuer(),
		"CRAIG_CONSOLE_OIDC_CLIENT_ID="+consoleClientID, "CRAIG_CONSOLE_FLEET_FILE="+fleet)
	cmd.Stderr = os.Stderr
	fmt.Printf("==> %s (records console at %s)\n", bin, base)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", bin, err)
	}
	p := &demoProcess{name: bin, cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	return p, waitHTTP(base+"/healthz", 30*time.Second)
}

// waitHTTP polls url until it answers 200, up to limit.
func waitHTTP(url string, limit time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(limit)
	for {
		resp, err := client.Get(url) //nolint:noctx // a bounded poll of a child on loopback
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer within %v", url, limit)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
