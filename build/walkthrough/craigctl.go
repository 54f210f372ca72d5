package walkthrough

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/term"

	"github.com/craig/retention/build/workspace"
	"github.com/craig/retention/kernel/settings"
)

// demoTokenTTL bounds the demo operator's token.
const demoTokenTTL = 12 * time.Hour

// The demo's two operators: the one who does everything, and the second
// identity rules' dual control needs to approve a purge.
const (
	demoOperator = "demo:operator"
	demoApprover = "demo:approver"
	demoScopes   = "archive:read archive:run archive:hold archive:purge archive:seal archive:sealed-read records:schedule records:events records:review outbox:read outbox:retry"
)

// demoSchedule is the example records schedule the demo puts in force
// (ADR-073), relative to the repository's root, and its version.
const (
	demoSchedule        = "deploy/records-schedule/example.yaml"
	demoScheduleVersion = "CW-2026.1"
)

// demoClosedCases are the demo's cases closed, unsubstantiated, six years
// ago: their audit trail on security falls due under item AL-5U (five years
// after closure); their rule evaluations (RE-3, three years after each
// record) do not.
var demoClosedCases = []string{"case:1", "case:2", "case:3", "case:4", "case:5"}

// demoCraigctl runs a craigctl session against the demo's serves: the
// ledger, an archived evaluation fetched by id, a deep verify and the fleet
// check; with keep it then writes the operators' environment, prints it and
// waits for an interrupt.
func demoCraigctl(ctx context.Context, in Instance, idp *demoIdP, rulesDB, keyDir, pids string, keep bool) error {
	token, err := idp.mint(demoOperator)
	if err != nil {
		return err
	}
	fleet := filepath.Join(keyDir, "fleet.yaml")
	if err := os.WriteFile(fleet, fmt.Appendf(nil, "services:\n  - {name: rules, url: \"http://%s\"}\n  - {name: security, url: \"http://%s\"}\n",
		in.RulesAddr, in.SecurityAddr), 0o600); err != nil {
		return err
	}
	env := map[string]string{"CRAIG_TOKEN": token, "CRAIG_RULES_URL": "http://" + in.RulesAddr, "CRAIG_SECURITY_URL": "http://" + in.SecurityAddr}
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
		// demoUp leaves the schedule to the runbook (its §10 loads it):
		// its earlier sections purge by date, as before any schedule.
		return demoDisposition(ctx, idp, env, fleet)
	}
	return demoWait(ctx, in, idp, env, keyDir, fleet, pids)
}

// demoStep is one craigctl call of the demo, with the environment
// (the operator's token or the second identity's) it runs with.
type demoStep struct {
	env  map[string]string
	args []string
}

// demoDisposition puts the example schedule in force on rules and
// security (proposed by the operator, approved by the second identity),
// closes the demo's closed cases six years ago, lists what is due, freezes
// a batch of it on security and has the second identity approve it, then
// prints the batch's certificate.
func demoDisposition(ctx context.Context, idp *demoIdP, env map[string]string, fleet string) error {
	approver, err := idp.mint(demoApprover)
	if err != nil {
		return err
	}
	second := maps.Clone(env)
	second["CRAIG_TOKEN"] = approver
	schedule, err := filepath.Abs(demoSchedule) // mage runs in the repository root
	if err != nil {
		return err
	}
	fmt.Println("\n==> the records schedule (ADR-073): the example schedule in force, six-year-old closures, one reviewed disposition")
	closedAt := time.Now().UTC().AddDate(-6, 0, 0).Format(time.RFC3339)
	steps := []demoStep{
		{env, []string{"schedule", "propose", schedule, "--fleet", fleet}},
		{second, []string{"schedule", "approve", demoScheduleVersion, "--fleet", fleet}},
	}
	for _, c := range demoClosedCases {
		steps = append(steps, demoStep{env, []string{"subject", "event", c, "--fleet", fleet, "--type", "case.closed", "--at", closedAt, "--classification", "Unsubstantiated"}})
	}
	steps = append(steps, demoStep{env, []string{"disposition", "due", "--fleet", fleet}})
	for _, st := range steps {
		fmt.Printf("\n$ craigctl %s\n", strings.Join(st.args, " "))
		if err := runCraigctl(ctx, st.env, st.args); err != nil {
			return err
		}
	}
	fmt.Println("\n$ craigctl disposition freeze --service security")
	out, err := captureCraigctl(ctx, env, []string{"disposition", "freeze", "--service", "security"})
	if err != nil {
		return err
	}
	fmt.Print(out)
	var batch struct {
		ID string `json:"disposition_id"`
	}
	if err := json.Unmarshal([]byte(out), &batch); err != nil || batch.ID == "" {
		return fmt.Errorf("the frozen batch: %q: %w", out, err)
	}
	for _, st := range []demoStep{
		{second, []string{"disposition", "approve", batch.ID, "--service", "security"}},
		{env, []string{"disposition", "show", batch.ID, "--service", "security", "--certificate"}},
	} {
		fmt.Printf("\n$ craigctl %s\n", strings.Join(st.args, " "))
		if err := runCraigctl(ctx, st.env, st.args); err != nil {
			return err
		}
	}
	return nil
}

// demoWait starts the records console, writes the operators' environment (the state file), prints how
// to use it and waits for an interrupt; the state file goes with the
// serves.
func demoWait(ctx context.Context, in Instance, idp *demoIdP, env map[string]string, keyDir, fleet, pids string) error {
	approver, err := idp.mint(demoApprover)
	if err != nil {
		return err
	}
	// Two readers for tests of sealed access: read only, and read with
	// the sealed-read role.
	var readers string
	for name, scopes := range map[string][]string{"READER_TOKEN": {"archive:read"}, "SEALED_READER_TOKEN": {"archive:read", "archive:sealed-read"}} {
		tok, err := idp.p.Mint("ops:reader", scopes, demoTokenTTL)
		if err != nil {
			return err
		}
		readers += name + "=" + tok + "\n"
	}
	console, err := demoConsole(in, idp, fleet)
	if err != nil {
		return err
	}
	defer console.stop()
	tokenFile, approverFile := filepath.Join(keyDir, "operator.token"), filepath.Join(keyDir, "approver.token")
	state := in.StateFile
	if state == "" {
		state = filepath.Join(keyDir, "demo.env")
	}
	defer func() { _ = os.Remove(state) }()
	for file, content := range map[string]string{
		tokenFile: env["CRAIG_TOKEN"] + "\n", approverFile: approver + "\n",
		state: fmt.Sprintf("CRAIG_RULES_URL=%s\nCRAIG_SECURITY_URL=%s\nCRAIG_TOKEN=%s\nSECOND_OPERATOR_TOKEN=%s\nFLEET_FILE=%s\nCONSOLE_URL=%s\n",
			env["CRAIG_RULES_URL"], env["CRAIG_SECURITY_URL"], env["CRAIG_TOKEN"], approver, fleet, "http://"+in.ConsoleAddr) + pids + readers,
	} {
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			return err
		}
	}
	fmt.Printf("\nThe demo's services are serving (rules with dual control). In another shell:\n\n"+
		"  export CRAIG_RULES_URL=%s CRAIG_SECURITY_URL=%s\n  export CRAIG_TOKEN=$(cat %s) SECOND_OPERATOR_TOKEN=$(cat %s)\n"+
		"  go run ./cmd/craigctl archive records list --service rules\n\nfleet file: %s; the same as KEY=value lines: %s.\n"+
		"Ctrl-C stops them (and deletes the tokens).\n\nThe records console: http://%s (sign in as the records officer or counsel)\n",
		env["CRAIG_RULES_URL"], env["CRAIG_SECURITY_URL"], tokenFile, approverFile, fleet, state, in.ConsoleAddr)
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
	cmd := craigctl(ctx, env, args)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stdout
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("craigctl %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// captureCraigctl is runCraigctl returning what it printed.
func captureCraigctl(ctx context.Context, env map[string]string, args []string) (string, error) {
	cmd := craigctl(ctx, env, args)
	cmd.Stderr = os.Stdout
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("craigctl %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}

// craigctl is the craigctl command with only env.
func craigctl(ctx context.Context, env map[string]string, args []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, workspace.Binary("craigctl"), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	return cmd
}
