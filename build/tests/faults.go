package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/craig/retention/build/store"
	"github.com/craig/retention/build/workspace"

	"github.com/magefile/mage/mg"
)

// faultsFuzzTime is how long each fuzz target runs in test:faults (a
// minute finds shallow parser bugs in CI's time); CRAIG_FAULTS_FUZZTIME overrides it (a Go duration).
const faultsFuzzTime = "60s"

// fuzzTargets are the suite's fuzzers: module directory, package, target.
var fuzzTargets = []struct{ dir, pkg, name string }{
	{"kernel", "./settings", "FuzzLoad"},
	{"services/security", "./fleet", "FuzzValidate"},
	{"kernel", "./auth", "FuzzVerify"},
	{"kernel", "./app", "FuzzReplayRequest"},
}

// Faults runs the fault suite (faults/, tag faults: failpoint kills, store faults, a dying database) and each fuzz target for CRAIG_FAULTS_FUZZTIME (60s), then prints the report; CRAIG_FAULTS_ROUNDS scales the matrices (default 20).
func (Test) Faults(ctx context.Context) error {
	mg.CtxDeps(ctx, store.Store.Up)
	if err := checkServers(); err != nil {
		return err
	}
	report, err := os.CreateTemp("", "craig-faults-report-*.jsonl")
	if err != nil {
		return err
	}
	_ = report.Close()
	defer func() { _ = os.Remove(report.Name()) }()
	fmt.Println("==> go test -tags faults -count=1 ./faults/")
	cmd := exec.CommandContext(ctx, mg.GoCmd(), "test", "-tags", "faults", "-count=1", "-timeout", "20m", "./faults/")
	cmd.Env = append(os.Environ(), "CRAIG_FAULTS_REPORT="+report.Name())
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	suiteErr := cmd.Run()
	modelErr := runModel(ctx)
	execs, fuzzErr := runFuzzers(ctx)
	printFaultsReport(report.Name(), execs)
	return errors.Join(suiteErr, modelErr, fuzzErr)
}

// faultsModelChecks is how many random sequences the lifecycle model runs
// here (the ordinary test run takes 25; 100 take about 5 minutes): CRAIG_FAULTS_MODEL_CHECKS
// overrides it.
const faultsModelChecks = "100"

// faultsDestructionChecks is how many random sequences the destruction
// model (SIGKILLs, cancels, restores and reconcile) runs here (the
// ordinary run takes 8, about a minute and a half; a restore costs a
// pg_dump and a pg_restore): CRAIG_FAULTS_DESTRUCTION_CHECKS overrides it.
const faultsDestructionChecks = "20"

// runModel runs the lifecycle and destruction model tests longer than the
// ordinary run, with a random seed unless RAPID_SEED names one (each prints
// the seed of a failure, to replay it).
func runModel(ctx context.Context) error {
	var errs []error
	for _, m := range []struct{ name, env, checks string }{
		{"TestLifecycleModel", "CRAIG_MODEL_CHECKS", workspace.EnvOr("CRAIG_FAULTS_MODEL_CHECKS", faultsModelChecks)},
		{"TestDestructionModel", "CRAIG_DESTRUCTION_CHECKS", workspace.EnvOr("CRAIG_FAULTS_DESTRUCTION_CHECKS", faultsDestructionChecks)},
	} {
		fmt.Printf("==> go test -run '^%s$' ./lifecycle/ (kernel), %s sequences\n", m.name, m.checks)
		cmd := exec.CommandContext(ctx, mg.GoCmd(), "-C", "kernel", "test", "-count=1", "-timeout", "30m", "-v",
			"-run", "^"+m.name+"$", "./lifecycle/", "-rapid.seed="+workspace.EnvOr("RAPID_SEED", "0"))
		// The count goes by the environment: -rapid.checks=100 is rapid's
		// default, which the tests take for "not set".
		cmd.Env = append(os.Environ(), "CRAIG_MODEL_RANDOM=1", m.env+"="+m.checks)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		errs = append(errs, cmd.Run())
	}
	return errors.Join(errs...)
}

var fuzzExecs = regexp.MustCompile(`execs: (\d+)`)

// runFuzzers runs every fuzz target for the fuzz time and returns the
// executions each reached.
func runFuzzers(ctx context.Context) (map[string]string, error) {
	fuzzTime := workspace.EnvOr("CRAIG_FAULTS_FUZZTIME", faultsFuzzTime)
	execs := map[string]string{}
	var errs []error
	for _, f := range fuzzTargets {
		n, err := runFuzzer(ctx, f.dir, f.pkg, f.name, fuzzTime)
		execs[f.name] = n
		if err != nil {
			errs = append(errs, err)
		}
	}
	return execs, errors.Join(errs...)
}

// runFuzzer runs one fuzz target and returns the executions it reached.
//
// Go 1.26's fuzz coordinator can end a duration-bounded run with a bare
// "context deadline exceeded" and no failing input when the deadline races
// a worker on a loaded machine (go.dev/issue/75804, fixed in Go 1.27). That
// run found nothing: it is reported as the race, not as a failure. Every
// other failure, and any failure that wrote an input, fails the target.
func runFuzzer(ctx context.Context, dir, pkg, name, fuzzTime string) (string, error) {
	corpus := filepath.Join(dir, pkg, "testdata", "fuzz", name)
	before := corpusFiles(corpus)
	fmt.Printf("==> go test -run '^$' -fuzz '^%s$' -fuzztime %s %s (%s)\n", name, fuzzTime, pkg, dir)
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, mg.GoCmd(), "-C", dir, "test", "-run", "^$", "-fuzz", "^"+name+"$", "-fuzztime", fuzzTime, pkg)
	cmd.Stdout, cmd.Stderr = io.MultiWriter(&out, os.Stdout), os.Stderr
	runErr := cmd.Run()
	last := ""
	sc := bufio.NewScanner(bytes.NewReader(out.Bytes()))
	for sc.Scan() {
		if m := fuzzExecs.FindStringSubmatch(sc.Text()); m != nil {
			last = m[1]
		}
	}
	if runErr == nil {
		return last, nil
	}
	added := newCorpusFiles(before, corpusFiles(corpus))
	if len(added) == 0 && coordinatorRace(out.String(), name) {
		fmt.Printf("%s: ended by Go's fuzz-time race (go.dev/issue/75804) after %s executions; no failing input was written\n", name, last)
		return last, nil
	}
	return last, fmt.Errorf("%s: %w (failing inputs: %s)", name, runErr, strings.Join(added, ", "))
}

// coordinatorRace reports whether a fuzz run's only failure is the bare
// deadline Go's coordinator reports when its fuzz time races a worker.
func coordinatorRace(out, name string) bool {
	i := strings.Index(out, "--- FAIL: "+name+" ")
	if i < 0 {
		return false
	}
	lines := strings.Split(strings.TrimSpace(out[i:]), "\n")
	var msgs []string
	for _, l := range lines[1:] {
		l = strings.TrimSpace(l)
		if l == "FAIL" || strings.HasPrefix(l, "FAIL\t") || strings.HasPrefix(l, "exit status") {
			continue
		}
		msgs = append(msgs, l)
	}
	return len(msgs) == 1 && msgs[0] == "context deadline exceeded"
}

func corpusFiles(dir string) map[string]bool {
	out := map[string]bool{}
	entries, _ := os.ReadDir(dir) // a missing corpus is an empty one
	for _, e := range entries {
		out[e.Name()] = true
	}
	return out
}

func newCorpusFiles(before, after map[string]bool) []string {
	var added []string
	for name := range after {
		if !before[name] {
			added = append(added, name)
		}
	}
	sort.Strings(added)
	return added
}

// faultsTally is one scenario line of the report (faults/harness_faults_test.go).
type faultsTally struct {
	Scenario   string         `json:"scenario"`
	Case       string         `json:"case"`
	Rounds     int            `json:"rounds"`
	Faults     map[string]int `json:"faults"`
	Checks     int            `json:"checks"`
	Orphans    int            `json:"orphans"`
	Violations int            `json:"violations"`
}

func printFaultsReport(path string, execs map[string]string) {
	b, err := os.ReadFile(path)
	if err != nil {
		fmt.Printf("no faults report: %v\n", err)
		return
	}
	var rows []faultsTally
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		var t faultsTally
		if json.Unmarshal([]byte(line), &t) == nil {
			rows = append(rows, t)
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Scenario+rows[i].Case < rows[j].Scenario+rows[j].Case })
	fmt.Println("\nFault suite report")
	fmt.Println("| scenario | case | rounds | faults injected | invariant checks | orphans left | violations |")
	fmt.Println("|---|---|---:|---|---:|---:|---:|")
	var rounds, checks, violations int
	for _, t := range rows {
		var fs []string
		for k, v := range t.Faults {
			fs = append(fs, fmt.Sprintf("%s %d", k, v))
		}
		sort.Strings(fs)
		fmt.Printf("| %s | %s | %d | %s | %d | %d | %d |\n", t.Scenario, t.Case, t.Rounds, strings.Join(fs, ", "), t.Checks, t.Orphans, t.Violations)
		rounds, checks, violations = rounds+t.Rounds, checks+t.Checks, violations+t.Violations
	}
	fmt.Printf("| **total** | | %d | | %d | | %d |\n", rounds, checks, violations)
	fmt.Println("\n| fuzz target | executions |\n|---|---:|")
	for _, f := range fuzzTargets {
		fmt.Printf("| %s | %s |\n", f.name, execs[f.name])
	}
}
