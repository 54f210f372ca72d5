package walkthrough

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5"
	"golang.org/x/term"

	"github.com/craig/retention/build/workspace"
	"github.com/craig/retention/kernel/settings"
)

// demoTokenTTL bounds the demo operator's token.
const demoTokenTTL = 12 * time.Hour

// demoCraigctl runs a craigctl session against the demo's serves: the
// ledger, an archived evaluation fetched by id, a deep verify and the fleet
// check; with keep it then prints the environment and waits for an
// interrupt.
func demoCraigctl(ctx context.Context, rulesDB, keyDir string, keep bool) error {
	secret, err := os.ReadFile(filepath.Join(keyDir, "api.secret"))
	if err != nil {
		return err
	}
	token, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "demo:operator",
		"scope": "archive:read archive:run archive:hold archive:purge", "exp": time.Now().Add(demoTokenTTL).Unix()}).SignedString(secret)
	if err != nil {
		return err
	}
	fleet := filepath.Join(keyDir, "fleet.yaml")
	if err := os.WriteFile(fleet, fmt.Appendf(nil, "services:\n  - {name: rules, url: \"http://%s\"}\n  - {name: security, url: \"http://%s\"}\n",
		demoRulesAddr, demoSecurityAdd), 0o600); err != nil {
		return err
	}
	env := map[string]string{"CRAIG_TOKEN": token, "CRAIG_RULES_URL": "http://" + demoRulesAddr, "CRAIG_SECURITY_URL": "http://" + demoSecurityAdd}
	rowID, err := demoArchivedRow(ctx, rulesDB)
	if err != nil {
		return err
	}
	fmt.Println("\n==> craigctl against the demo's serves (CRAIG_RULES_URL, CRAIG_SECURITY_URL, CRAIG_TOKEN as printed below)")
	for _, args := range [][]string{
		{"archive", "records", "list", "--service", "rules", "--limit", "5"},
		{"archive", "fetch", "rule_evaluations", "--service", "rules", "--id", rowID},
		{"archive", "verify", "--service", "security", "--deep"},
		{"fleet", "check", "--config", fleet},
	} {
		fmt.Printf("\n$ craigctl %s\n", strings.Join(args, " "))
		if err := runCraigctl(ctx, env, args); err != nil {
			return err
		}
	}
	if !keep {
		return nil
	}
	tokenFile := filepath.Join(keyDir, "operator.token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		return err
	}
	fmt.Printf("\nThe demo's services are serving. In another shell:\n\n  export CRAIG_RULES_URL=http://%s CRAIG_SECURITY_URL=http://%s\n  export CRAIG_TOKEN=$(cat %s)\n  go run ./cmd/craigctl archive records list --service rules\n\nfleet file: %s. Ctrl-C stops them (and deletes the token).\n",
		demoRulesAddr, demoSecurityAdd, tokenFile, fleet)
	if term.IsTerminal(int(os.Stdin.Fd())) { //nolint:gosec // a file descriptor fits an int
		fmt.Println("(waiting for Ctrl-C)")
	}
	sig, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-sig.Done()
	return nil
}

// demoArchivedRow is the id of an evaluation the demo archived (the first
// record of rules' first archive).
func demoArchivedRow(ctx context.Context, dbURL string) (string, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return "", fmt.Errorf("connect %s: %w", settings.Redact(dbURL), err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var id string
	if err := conn.QueryRow(ctx, `SELECT first_record_id::text FROM archive_ledger ORDER BY archived_at, archive_id LIMIT 1`).Scan(&id); err != nil {
		return "", fmt.Errorf("read rules' archive_ledger: %w", err)
	}
	return id, nil
}

// runCraigctl runs the craigctl binary Build made with only the demo's
// environment (no ambient CRAIG_* variable reaches it).
func runCraigctl(ctx context.Context, env map[string]string, args []string) error {
	cmd := exec.CommandContext(ctx, workspace.Binary("craigctl"), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stdout
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("craigctl %s: %w", strings.Join(args, " "), err)
	}
	return nil
}
