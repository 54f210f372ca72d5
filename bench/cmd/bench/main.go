// Command bench runs the retention benchmark (package bench) and writes
// bench/results/<date>.json plus a markdown table to stdout. Run it from the
// repo root as `go tool mage bench`, which builds the rules binary and starts
// the S3 store first, or directly:
//
//	go run ./bench/cmd/bench -rules-bin bin/rules -security-bin bin/security [-drain-rows N] [-steady-rows N] [-archive-rows N]
//	    [-rounds N] [-writer-rate N] [-timebox D] [-scenarios drain,steady,writer,archive] [-smoke] [-out DIR]
//
// Every flag defaults to its CRAIG_BENCH_* environment variable, then to the
// full-size defaults (2,000,000 / 5,000,000 / 200,000 rows, 5 rounds,
// 200 writes/s, 15 s time box).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/craig/retention/bench"
)

func main() { os.Exit(run()) }

func run() int {
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
	base := bench.Default()
	base.Log = logf
	cfg, err := bench.FromEnv(base, os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	out, err := parseFlags(&cfg, os.Args[1:])
	if err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := bench.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	path, err := bench.WriteJSON(res, out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	fmt.Print(bench.Markdown(res))
	fmt.Printf("\nresults: %s (%.0f s)\n", path, res.Seconds)
	return 0
}

// parseFlags applies the command line to cfg (flags beat the environment)
// and returns the results directory.
func parseFlags(cfg *bench.Config, args []string) (out string, err error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	smoke := fs.Bool("smoke", cfg.Smoke, "tiny sizes (env "+bench.EnvSmoke+")")
	fs.StringVar(&cfg.DatabaseURL, "database-url", cfg.DatabaseURL, "PostgreSQL server (env "+bench.EnvDatabaseURL+")")
	fs.StringVar(&cfg.S3URL, "s3-url", cfg.S3URL, "bucket URL of the archive scenario (env "+bench.EnvS3URL+")")
	fs.StringVar(&cfg.RulesBinary, "rules-bin", "bin/rules", "built rules binary the archive scenario runs")
	fs.StringVar(&cfg.SecurityBinary, "security-bin", "bin/security", "built security binary the security_archive scenario runs")
	fs.StringVar(&cfg.AMQPURL, "amqp-url", cfg.AMQPURL, "broker of the fleet scenario (env "+bench.EnvAMQPURL+")")
	fs.IntVar(&cfg.FleetEvents, "fleet-events", cfg.FleetEvents, "signed archive events per fleet round (env "+bench.EnvFleetEvents+")")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "interleaved rounds per configuration, ≥ 3 (env "+bench.EnvRounds+")")
	fs.IntVar(&cfg.DrainRows, "drain-rows", cfg.DrainRows, "event_outbox rows of the drain and writer scenarios (env "+bench.EnvDrainRows+")")
	fs.IntVar(&cfg.SteadyRows, "steady-rows", cfg.SteadyRows, "event_outbox rows of the steady scenario (env "+bench.EnvSteadyRows+")")
	fs.IntVar(&cfg.ArchiveRows, "archive-rows", cfg.ArchiveRows, "aged rule_evaluations of the archive scenario (env "+bench.EnvArchiveRows+")")
	fs.IntVar(&cfg.WriterRate, "writer-rate", cfg.WriterRate, "writer events per second (env "+bench.EnvWriterRate+")")
	fs.DurationVar(&cfg.TimeBox, "timebox", cfg.TimeBox, "time box of the oldest-first drain per round (env "+bench.EnvTimeBox+")")
	scenarios := fs.String("scenarios", strings.Join(cfg.Scenarios, ","), "scenarios to run (env "+bench.EnvScenarios+")")
	outDir := fs.String("out", "bench/results", "directory of the results JSON")
	if err := fs.Parse(args); err != nil {
		return "", err
	}
	if *smoke && !cfg.Smoke {
		applySmoke(cfg, fs)
	}
	cfg.Scenarios = bench.ParseScenarios(*scenarios)
	return *outDir, nil
}

// applySmoke sets the tiny sizes, except those given by flag too.
func applySmoke(cfg *bench.Config, fs *flag.FlagSet) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	s := bench.Smoke()
	for name, v := range map[string]struct{ dst, src *int }{
		"drain-rows": {&cfg.DrainRows, &s.DrainRows}, "steady-rows": {&cfg.SteadyRows, &s.SteadyRows},
		"archive-rows": {&cfg.ArchiveRows, &s.ArchiveRows}, "writer-rate": {&cfg.WriterRate, &s.WriterRate},
	} {
		if !set[name] {
			*v.dst = *v.src
		}
	}
	if !set["timebox"] {
		cfg.TimeBox = s.TimeBox
	}
	cfg.ArchiveBigRows = s.ArchiveBigRows
	cfg.Smoke = true
}
