//go:build ignore
// +build ignore

package main

import (
	_context "context"
	_flag "flag"
	_fmt "fmt"
	_io "io"
	_log "log"
	_os "os"
	_signal "os/signal"
	_filepath "path/filepath"
	_sort "sort"
	_strconv "strconv"
	_strings "strings"
	_syscall "syscall"
	_tabwriter "text/tabwriter"
	_time "time"
	bench_mageimport "github.com/craig/retention/build/bench"
	binaries_mageimport "github.com/craig/retention/build/binaries"
	codegen_mageimport "github.com/craig/retention/build/codegen"
	demo_mageimport "github.com/craig/retention/build/demo"
	lint_mageimport "github.com/craig/retention/build/lint"
	migrate_mageimport "github.com/craig/retention/build/migrate"
	partition_mageimport "github.com/craig/retention/build/partition"
	replica_mageimport "github.com/craig/retention/build/replica"
	store_mageimport "github.com/craig/retention/build/store"
	tests_mageimport "github.com/craig/retention/build/tests"
	
)

func main() {
	// Use local types and functions in order to avoid name conflicts with additional magefiles.
	type arguments struct {
		Verbose       bool          // print out log statements
		List          bool          // print out a list of targets
		Help          bool          // print out help for a specific target
		Timeout       _time.Duration // set a timeout to running the targets
		Args          []string      // args contain the non-flag command-line arguments
	}

	parseBool := func(env string) bool {
		val := _os.Getenv(env)
		if val == "" {
			return false
		}		
		b, err := _strconv.ParseBool(val)
		if err != nil {
			_log.Printf("warning: environment variable %s is not a valid bool value: %v", env, val)
			return false
		}
		return b
	}

	parseDuration := func(env string) _time.Duration {
		val := _os.Getenv(env)
		if val == "" {
			return 0
		}		
		d, err := _time.ParseDuration(val)
		if err != nil {
			_log.Printf("warning: environment variable %s is not a valid duration value: %v", env, val)
			return 0
		}
		return d
	}
	args := arguments{}
	fs := _flag.FlagSet{}
	fs.SetOutput(_os.Stdout)

	// default flag set with ExitOnError and auto generated PrintDefaults should be sufficient
	fs.BoolVar(&args.Verbose, "v", parseBool("MAGEFILE_VERBOSE"), "show verbose output when running targets")
	fs.BoolVar(&args.List, "l", parseBool("MAGEFILE_LIST"), "list targets for this binary")
	fs.BoolVar(&args.Help, "h", parseBool("MAGEFILE_HELP"), "print out help for a specific target")
	fs.DurationVar(&args.Timeout, "t", parseDuration("MAGEFILE_TIMEOUT"), "timeout in duration parsable format (e.g. 5m30s)")
	fs.Usage = func() {
		_fmt.Fprintf(_os.Stdout, `
%s [options] [target]

Commands:
  -l    list targets in this binary
  -h    show this help

Options:
  -h    show description of a target
  -t <string>
        timeout in duration parsable format (e.g. 5m30s)
  -v    show verbose output when running targets
 `[1:], _filepath.Base(_os.Args[0]))
	}
	if err := fs.Parse(_os.Args[1:]); err != nil {
		// flag will have printed out an error already.
		return
	}
	args.Args = fs.Args()
	if args.Help && len(args.Args) == 0 {
		fs.Usage()
		return
	}
		
	var printName = func(str string) string {
	// color is ANSI color type
	type color int

	// If you add/change/remove any items in this constant,
	// you will need to run "stringer -type=color" in this directory again.
	// NOTE: Please keep the list in an alphabetical order.
	const (
		black color = iota
		red
		green
		yellow
		blue
		magenta
		cyan
		white
		brightblack
		brightred
		brightgreen
		brightyellow
		brightblue
		brightmagenta
		brightcyan
		brightwhite
	)

	// AnsiColor are ANSI color codes for supported terminal colors.
	var ansiColor = map[color]string{
		black:         "\u001b[30m",
		red:           "\u001b[31m",
		green:         "\u001b[32m",
		yellow:        "\u001b[33m",
		blue:          "\u001b[34m",
		magenta:       "\u001b[35m",
		cyan:          "\u001b[36m",
		white:         "\u001b[37m",
		brightblack:   "\u001b[30;1m",
		brightred:     "\u001b[31;1m",
		brightgreen:   "\u001b[32;1m",
		brightyellow:  "\u001b[33;1m",
		brightblue:    "\u001b[34;1m",
		brightmagenta: "\u001b[35;1m",
		brightcyan:    "\u001b[36;1m",
		brightwhite:   "\u001b[37;1m",
	}

	const colorName = "blackredgreenyellowbluemagentacyanwhitebrightblackbrightredbrightgreenbrightyellowbrightbluebrightmagentabrightcyanbrightwhite"

	var colorIndex = [...]uint8{0, 5, 8, 13, 19, 23, 30, 34, 39, 50, 59, 70, 82, 92, 105, 115, 126}

	colorToLowerString := func(i color) string {
		if i < 0 || i >= color(len(colorIndex)-1) {
			return "color(" + _strconv.FormatInt(int64(i), 10) + ")"
		}
		return colorName[colorIndex[i]:colorIndex[i+1]]
	}

	// ansiColorReset is an ANSI color code to reset the terminal color.
	const ansiColorReset = "\033[0m"

	// defaultTargetAnsiColor is a default ANSI color for colorizing targets.
	// It is set to Cyan as an arbitrary color, because it has a neutral meaning
	var defaultTargetAnsiColor = ansiColor[cyan]

	getAnsiColor := func(color string) (string, bool) {
		colorLower := _strings.ToLower(color)
		for k, v := range ansiColor {
			colorConstLower := colorToLowerString(k)
			if colorConstLower == colorLower {
				return v, true
			}
		}
		return "", false
	}

	// Terminals which  don't support color:
	//
	//	TERM=vt100
	//	TERM=cygwin
	//	TERM=xterm-mono
	var noColorTerms = map[string]bool{
		"vt100":      false,
		"cygwin":     false,
		"xterm-mono": false,
	}

	// terminalSupportsColor checks if the current console supports color output
	//
	// Supported:
	//
	//	linux, mac, or windows's ConEmu, Cmder, putty, git-bash.exe, pwsh.exe
	//
	// Not supported:
	//
	//	windows cmd.exe, powerShell.exe
	terminalSupportsColor := func() bool {
		envTerm := _os.Getenv("TERM")
		if _, ok := noColorTerms[envTerm]; ok {
			return false
		}
		return true
	}

	// enableColor reports whether the user has requested to enable a color output.
	enableColor := func() bool {
		b, _ := _strconv.ParseBool(_os.Getenv("MAGEFILE_ENABLE_COLOR"))
		return b
	}

	// targetColor returns the ANSI color which should be used to colorize targets.
	targetColor := func() string {
		s, exists := _os.LookupEnv("MAGEFILE_TARGET_COLOR")
		if exists {
			if c, ok := getAnsiColor(s); ok {
				return c
			}
		}
		return defaultTargetAnsiColor
	}

	// store the color terminal variables, so that the detection isn't repeated for each target
	var enableColorValue = enableColor() && terminalSupportsColor()
	var targetColorValue = targetColor()

	if enableColorValue {
		return _fmt.Sprintf("%s%s%s", targetColorValue, str, ansiColorReset)
	}

	return str
}


	list := func() error {
		_fmt.Println(`Workspace tasks for the CRAIG retention toolkit, run from the repo root as "go tool mage <target>". Aliases: "test" runs test:all and "bench" runs bench:run (a mage target cannot share its name with a namespace); migrate:up, migrate:status and migrate:new run the migrations namespace's targets ("migrate" itself is a target, so 'go tool mage -h migrate' answers). The targets live in build/ (its own module, with the tools).
`)
		targets := map[string]string{
			"bench:run": "benchmarks the kernel against the ceiling and its peers on scratch databases and the S3 store (sizes: CRAIG_BENCH_* env), writing bench/results/<date>.json (alias: bench).",
			"bench:smoke": "runs the benchmark at tiny sizes as its scratch test (TestBenchSmoke, also part of test); starts the S3 store.",
			"build": "compiles every service binary and craigctl into bin/ (bin/exchange, bin/financial, bin/rules, bin/security, bin/craigctl).",
			"gen:verify": "fails when the committed sqlc code, a generated doc (docs/configuration.md, docs/craigctl.md, docs/tables.md) or any module's go.mod/go.sum is stale.",
			"docs": "regenerates docs/configuration.md (every key of every service: its environment variable, type, default and description), docs/craigctl.md (every craigctl command and flag) and docs/tables.md (every swept and archived table); generate runs it after sqlc.",
			"generate": "regenerates the sqlc query code (go tool sqlc generate), then the generated docs (docs/configuration.md, docs/craigctl.md, docs/tables.md).",
			"demo": "seeds craig_demo_<service> databases (walkthrough.EnvName names others), runs one sweep per service, archives the aged rule evaluations and prints before/after counts, archives and ledger rows.",
			"demoUp": "runs the demo, then leaves rules' and security's serve running with their archive APIs for craigctl (the runbook's walk-through) until interrupted; it prints the environment to export.",
			"lint": "fails on unformatted Go files (gofmt -l), go vet findings and golangci-lint findings (.golangci.yml) in every module and magefile.go.",
			"migrations:new": "creates migrations/<set>/NNNNN_<name>.sql, the next goose migration of a set (args: set name).",
			"migrations:status": "prints every migration of every service database and whether it is applied.",
			"migrations:up": "applies pending migrations to every service database (CRAIG_<SVC>__DATABASE_URL, default craig_<svc> on the local server), creating missing databases; each service's own binary runs its 'migrate', so exactly the sets it embeds are applied (alias: migrate:up).",
			"migrate": "applies pending migrations to every service database, creating missing databases: each service's binary runs its own 'migrate' (migrations:up; migrations:status shows what is applied, migrations:new <set> <name> adds a file).",
			"partition:outbox": "converts the event_outbox of CRAIG_PARTITION_DATABASE_URL into daily partitions made by pg_partman (retention off: the kernel retires them), in one transaction; stop the service first.",
			"replica:down": "stops the standby replica:up started and drops its replication slot on the primary (craig_retention_replica: it would keep every WAL segment from then on); a no-op when neither is there.",
			"replica:up": "makes a streaming replica of the test server (pg_basebackup -R, streaming from the physical replication slot craig_retention_replica) in a temporary directory and starts it on 127.0.0.1:5433 (adds a loopback replication trust line to the primary's pg_hba.conf first); a no-op when it streams.",
			"store:down": "stops the versitygw store:up started (SIGTERM via its pid file, SIGKILL after 10 s); a no-op when none runs.",
			"store:up": "installs versitygw once (cached), starts it on 127.0.0.1:7070 (craig/craigsecret) and creates bucket craig-archive; a no-op when it is up.",
			"test:addTable": "runs the proof that a table is one registration in full: on a copy of the repository with the tables of e2e/testdata/addtable added (a swept table to exchange and financial, an archived one to rules and security), go tool mage generate, then go test work at the copy's root (every module's whole suite; about half an hour here); .ci/run's e2e runs the same proof with the services' suites only.",
			"test:all": "runs EVERYTHING: every workspace module's go test ./...",
			"test:clean": "drops the scratch-database templates a plain go test left (<prefix>_tpl_*, CRAIG_TEST_DB_PREFIX, default craig_t): marked as templates, dropdb refuses them; the other test targets drop them when they end.",
			"test:conformance": "runs every conformance suite (TestConformance*: each service's tables, the store drivers); needs PostgreSQL, starts the S3 store.",
			"test:faults": "runs the fault suite (faults/, tag faults: failpoint kills, store faults, a dying database) and each fuzz target for CRAIG_FAULTS_FUZZTIME (60s), then prints the report; CRAIG_FAULTS_ROUNDS scales the matrices (default 20).",
			"test:scratch": "runs every workspace module's go test ./...",
			"test:service": "runs one service module's go test ./...",
			"test:unit": "runs go test -short in every workspace module: what needs no server (database, broker and store tests skip themselves).",
		}

		keys := make([]string, 0, len(targets))
		for name := range targets {
			keys = append(keys, name)
		}
		_sort.Strings(keys)

		_fmt.Println("Targets:")
		w := _tabwriter.NewWriter(_os.Stdout, 0, 4, 4, ' ', 0)
		for _, name := range keys {
			_fmt.Fprintf(w, "  %v\t%v\n", printName(name), targets[name])
		}
		err := w.Flush()
		return err
	}

	var ctx _context.Context
	ctxCancel := func(){}

	// by deferring in a closure, we let the cancel function get replaced
	// by the getContext function.
	defer func() {
		ctxCancel()
	}()

	getContext := func() (_context.Context, func()) {
		if ctx == nil {
			if args.Timeout != 0 {
				ctx, ctxCancel = _context.WithTimeout(_context.Background(), args.Timeout)
			} else {
				ctx, ctxCancel = _context.WithCancel(_context.Background())
			}
		}

		return ctx, ctxCancel
	}

	runTarget := func(logger *_log.Logger, fn func(_context.Context) error) interface{} {
		var err interface{}
		ctx, cancel := getContext()
		d := make(chan interface{})
		go func() {
			defer func() {
				err := recover()
				d <- err
			}()
			err := fn(ctx)
			d <- err
		}()
		sigCh := make(chan _os.Signal, 1)
		_signal.Notify(sigCh, _syscall.SIGINT)
		select {
		case <-sigCh:
			logger.Println("cancelling mage targets, waiting up to 5 seconds for cleanup...")
			cancel()
			cleanupCh := _time.After(5 * _time.Second)

			select {
			// target exited by itself
			case err = <-d:
				return err
			// cleanup timeout exceeded
			case <-cleanupCh:
				return _fmt.Errorf("cleanup timeout exceeded")
			// second SIGINT received
			case <-sigCh:
				logger.Println("exiting mage")
				return _fmt.Errorf("exit forced")
			}
		case <-ctx.Done():
			cancel()
			e := ctx.Err()
			_fmt.Printf("ctx err: %v\n", e)
			return e
		case err = <-d:
			// we intentionally don't cancel the context here, because
			// the next target will need to run with the same _context.
			return err
		}
	}
	// This is necessary in case there aren't any targets, to avoid an unused
	// variable error.
	_ = runTarget

	handleError := func(logger *_log.Logger, err interface{}) {
		if err != nil {
			logger.Printf("Error: %+v\n", err)
			type code interface {
				ExitStatus() int
			}
			if c, ok := err.(code); ok {
				_os.Exit(c.ExitStatus())
			}
			_os.Exit(1)
		}
	}
	_ = handleError

	// Set MAGEFILE_VERBOSE so mg.Verbose() reflects the flag value.
	if args.Verbose {
		_os.Setenv("MAGEFILE_VERBOSE", "1")
	} else {
		_os.Setenv("MAGEFILE_VERBOSE", "0")
	}

	_log.SetFlags(0)
	if !args.Verbose {
		_log.SetOutput(_io.Discard)
	}
	logger := _log.New(_os.Stderr, "", 0)
	if args.List {
		if err := list(); err != nil {
			_log.Println(err)
			_os.Exit(1)
		}
		return
	}

	if args.Help {
		if len(args.Args) < 1 {
			logger.Println("no target specified")
			_os.Exit(2)
		}
		switch _strings.ToLower(args.Args[0]) {
			case "bench:run":
				_fmt.Println("Run benchmarks the kernel against the ceiling and its peers on scratch databases and the S3 store (sizes: CRAIG_BENCH_* env), writing bench/results/<date>.json (alias: bench).")
				_fmt.Println()
				
				_fmt.Print("Usage:\n\n\tmage bench:run\n\n")
				var aliases []string
				aliases = append(aliases, "bench")
				
				
				
				
				if len(aliases) > 0 {
					_sort.Strings(aliases)
					_fmt.Printf("Aliases: %s\n\n", _strings.Join(aliases, ", "))
				}
				return
				case "bench:smoke":
				_fmt.Println("Smoke runs the benchmark at tiny sizes as its scratch test (TestBenchSmoke, also part of test); starts the S3 store.")
				_fmt.Println()
				
				_fmt.Print("Usage:\n\n\tmage bench:smoke\n\n")
				var aliases []string
				
				
				
				
				
				if len(aliases) > 0 {
					_sort.Strings(aliases)
					_fmt.Printf("Aliases: %s\n\n", _strings.Join(aliases, ", "))
				}
				return
				case "build":
				_fmt.Println("Build compiles every service binary and craigctl into bin/ (bin/exchange, bin/financial, bin/rules, bin/security, bin/craigctl).")
				_fmt.Println()
				
				_fmt.Print("Usage:\n\n\tmage build\n\n")
				var aliases []string
				
				
				
				
				
				if len(aliases) > 0 {
					_sort.Strings(aliases)
					_fmt.Printf("Aliases: %s\n\n", _strings.Join(aliases, ", "))
				}
				return
				case "gen:verify":
				_fmt.Println("Verify fails when the committed sqlc code, a generated doc (docs/configuration.md, docs/craigctl.md, docs/tables.md) or any module's go.mod/go.sum is stale.")
				_fmt.Println()
				
				_fmt.Print("Usage:\n\n\tmage gen:verify\n\n")
				var aliases []string
				
				
				
				
				
				if len(aliases) > 0 {
					_sort.Strings(aliases)
					_fmt.Printf("Aliases: %s\n\n", _strings.Join(aliases, ", "))
				}
				return
				case "docs":
				_fmt.Println("Docs regenerates docs/configuration.md (every key of every service: its environment variable, type, default and description), docs/craigctl.md (every craigctl command and flag) and docs/tables.md (every swept and archived table); generate runs it after sqlc.")
				_fmt.Println()
				
				_fmt.Print("Usage:\n\n\tmage docs\n\n")
				var aliases []string
				
				
				
				
				
				if len(aliases) > 0 {
					_sort.Strings(aliases)
					_fmt.Printf("Aliases: %s\n\n", _strings.Join(aliases, ", "))
				}
				return
				case "generate":
				_fmt.Println("Generate regenerates the sqlc query code (go tool sqlc generate), then the generated docs (docs/configuration.md, docs/craigctl.md, docs/tables.md).")
				_fmt.Println()
				
				_fmt.Print("Usage:\n\n\tmage generate\n\n")
				var aliases []string
				
				
				
				
				
				if len(aliases) > 0 {
					_sort.Strings(aliases)
					_fmt.Printf("Aliases: %s\n\n", _strings.Join(aliases, ", "))
				}
				return
				case "demo":
				_fmt.Println("Demo seeds craig_demo_<service> databases (walkthrough.EnvName names others), runs one sweep per service, archives the aged rule evaluations and prints before/after counts, archives and ledger rows.")
				_fmt.Println()
				
				_fmt.Print("Usage:\n\n\tmage demo\n\n")
				var aliases []string
				
				
				
				
				
				if len(aliases) > 0 {
					_sort.Strings(aliases)
					_fmt.Printf("Aliases: %s\n\n", _strings.Join(aliases, ", "))
				}
				return
				case "demoup":
				_fmt.Println("DemoUp runs the demo, then leaves rules' and security's serve running with their archive APIs for craigctl (the runbook's walk-through) until interrupted; it prints the environment to export.")
				_fmt.Println()
				
				_fmt.Print("Usage:\n\n\tmage demoup\n\n")
				var aliases []string
				
				
				
				
				
				if len(aliases) > 0 {
					_sort.Strings(aliases)
					_fmt.Printf("Aliases: %s\n\n", _strings.Join(aliases, ", "))
				}
				return
				case "lint":
				_fmt.Println("Lint fails on unformatted Go files (gofmt -l), go vet findings and golangci-lint findings (.golangci.yml) in every module and magefile.go.")
				_fmt.Println()
				
				_fmt.Print("Usage:\n\n\tmage lint\n\n")
				var aliases []string
				
				
				
				
				
				if len(aliases) > 0 {
					_sort.Strings(aliases)
					_fmt.Printf("Aliases: %s\n\n", _strings.Join(aliases, ", "))
				}
				return
				case "migrations:new":
				_fmt.Println("New creates migrations/<set>/NNNNN_<name>.sql, the next goose migration of a set (args: set name).")
				_fmt.Println()
				
				_fmt.Print("Usage:\n\n\tmage migrations:new <set> <name>\n\n")
				var aliases []string
				
				aliases = append(aliases, "migrate:new")
				
				
				
				if len(aliases) > 0 {
					_sort.Strings(aliases)
					_fmt.Printf("Aliases: %s\n\n", _strings.Join(aliases, ", "))
				}
				return
				case "migrations:status":
				_fmt.Println("Status prints every migration of every service database and whether it is applied.")
				_fmt.Println()
				
				_fmt.Print("Usage:\n\n\tmage migrations:status\n\n")
				var aliases []string
				
				
				aliases = append(aliases, "migrate:status")
				
				
				if len(aliases) > 0 {
					_sort.Strings(aliases)
					_fmt.Printf("Aliases: %s\n\n", _strings.Join(aliases, ", "))
				}
				return
				case "migrations:up":
				_fmt.Println("Up applies pending migrations to every service database (CRAIG_<SVC>__DATABASE_URL, default craig_<svc> on the local server), creating missing databases; each service's own binary runs its 'migrate', so exactly the sets it embeds are applied (alias: migrate:up).")
				_fmt.Println()
				
				_fmt.Print("Usage:\n\n\tmage migrations:up\n\n")
				var aliases []string
				
				
				
				aliases = append(aliases, "migrate:up")
				
				if len(aliases) > 0 {
					_sort.Strings(aliases)
					_fmt.Printf("Aliases: %s\n\n", _strings.Join(aliases, ", "))
				}
				return
				case "migrate":
				_fmt.Println("Migrate applies pending migrations to every service database, creating missing databases: each service's binary runs its own 'migrate' (migrations:up; migrations:status shows what is applied, migrations:new <set> <name> adds a file).")
				_fmt.Println()
				
				_fmt.Print("Usage:\n\n\tmage migrate\n\n")
				var aliases []string
				
				
				
				
				
				if len(aliases) > 0 {
					_sort.Strings(aliases)
					_fmt.Printf("Aliases: %s\n\n", _strings.Join(aliases, ", "))
				}
				return
				case "partition:outbox":
				_fmt.Println("Outbox converts the event_outbox of CRAIG_PARTITION_DATABASE_URL into daily partitions made by pg_partman (retention off: the kernel retires them), in one transaction; stop the service first.")
				_fmt.Println()
				
				_fmt.Print("Usage:\n\n\tmage partition:outbox\n\n")
				var aliases []string
				
				
				
				
				
				if len(aliases) > 0 {
					_sort.Strings(aliases)
					_fmt.Printf("Aliases: %s\n\n", _strings.Join(aliases, ", "))
				}
				return
				case "replica:down":
				_fmt.Println("Down stops the standby replica:up started and drops its replication slot on the primary (craig_retention_replica: it would keep every WAL segment from then on); a no-op when neither is there.")
				_fmt.Println()
				
				_fmt.Print("Usage:\n\n\tmage replica:down\n\n")
				var aliases []string
				
				
				
				
				
				if len(aliases) > 0 {
					_sort.Strings(aliases)
					_fmt.Printf("Aliases: %s\n\n", _strings.Join(aliases, ", "))
				}
				return
				case "replica:up":
				_fmt.Println("Up makes a streaming replica of the test server (pg_basebackup -R, streaming from the physical replication slot craig_retention_replica) in a temporary directory and starts it on 127.0.0.1:5433 (adds a loopback replication trust line to the primary's pg_hba.conf first); a no-op when it streams.")
				_fmt.Println()
				
				_fmt.Print("Usage:\n\n\tmage replica:up\n\n")
				var aliases []string
				
				
				
				
				
				if len(aliases) > 0 {
					_sort.Strings(aliases)
					_fmt.Printf("Aliases: %s\n\n", _strings.Join(aliases, ", "))
				}
				return
				case "store:down":
				_fmt.Println("Down stops the versitygw store:up started (SIGTERM via its pid file, SIGKILL after 10 s); a no-op when none runs.")
				_fmt.Println()
				
				_fmt.Print("Usage:\n\n\tmage store:down\n\n")
				var aliases []string
				
				
				
				
				
				if len(aliases) > 0 {
					_sort.Strings(aliases)
					_fmt.Printf("Aliases: %s\n\n", _strings.Join(aliases, ", "))
				}
				return
				case "store:up":
				_fmt.Println("Up installs versitygw once (cached), starts it on 127.0.0.1:7070 (craig/craigsecret) and creates bucket craig-archive; a no-op when it is up.")
				_fmt.Println()
				
				_fmt.Print("Usage:\n\n\tmage store:up\n\n")
				var aliases []string
				
				
				
				
				
				if len(aliases) > 0 {
					_sort.Strings(aliases)
					_fmt.Printf("Aliases: %s\n\n", _strings.Join(aliases, ", "))
				}
				return
				case "test:addtable":
				_fmt.Println("AddTable runs the proof that a table is one registration in full: on a copy of the repository with the tables of e2e/testdata/addtable added (a swept table to exchange and financial, an archived one to rules and security), go tool mage generate, then go test work at the copy's root (every module's whole suite; about half an hour here); .ci/run's e2e runs the same proof with the services' suites only. Needs PostgreSQL and RabbitMQ, starts the S3 store.")
				_fmt.Println()
				
				_fmt.Print("Usage:\n\n\tmage test:addtable\n\n")
				var aliases []string
				
				
				
				
				
				if len(aliases) > 0 {
					_sort.Strings(aliases)
					_fmt.Printf("Aliases: %s\n\n", _strings.Join(aliases, ", "))
				}
				return
				case "test:all":
				_fmt.Println("All runs EVERYTHING: every workspace module's go test ./... (unit, database and conformance suites), then the fault suite (test:faults); needs PostgreSQL and RabbitMQ, starts the S3 store and the streaming replica (alias: test).")
				_fmt.Println()
				
				_fmt.Print("Usage:\n\n\tmage test:all\n\n")
				var aliases []string
				
				
				
				
				aliases = append(aliases, "test")
				if len(aliases) > 0 {
					_sort.Strings(aliases)
					_fmt.Printf("Aliases: %s\n\n", _strings.Join(aliases, ", "))
				}
				return
				case "test:clean":
				_fmt.Println("Clean drops the scratch-database templates a plain go test left (<prefix>_tpl_*, CRAIG_TEST_DB_PREFIX, default craig_t): marked as templates, dropdb refuses them; the other test targets drop them when they end.")
				_fmt.Println()
				
				_fmt.Print("Usage:\n\n\tmage test:clean\n\n")
				var aliases []string
				
				
				
				
				
				if len(aliases) > 0 {
					_sort.Strings(aliases)
					_fmt.Printf("Aliases: %s\n\n", _strings.Join(aliases, ", "))
				}
				return
				case "test:conformance":
				_fmt.Println("Conformance runs every conformance suite (TestConformance*: each service's tables, the store drivers); needs PostgreSQL, starts the S3 store.")
				_fmt.Println()
				
				_fmt.Print("Usage:\n\n\tmage test:conformance\n\n")
				var aliases []string
				
				
				
				
				
				if len(aliases) > 0 {
					_sort.Strings(aliases)
					_fmt.Printf("Aliases: %s\n\n", _strings.Join(aliases, ", "))
				}
				return
				case "test:faults":
				_fmt.Println("Faults runs the fault suite (faults/, tag faults: failpoint kills, store faults, a dying database) and each fuzz target for CRAIG_FAULTS_FUZZTIME (60s), then prints the report; CRAIG_FAULTS_ROUNDS scales the matrices (default 20).")
				_fmt.Println()
				
				_fmt.Print("Usage:\n\n\tmage test:faults\n\n")
				var aliases []string
				
				
				
				
				
				if len(aliases) > 0 {
					_sort.Strings(aliases)
					_fmt.Printf("Aliases: %s\n\n", _strings.Join(aliases, ", "))
				}
				return
				case "test:scratch":
				_fmt.Println("Scratch runs every workspace module's go test ./... (unit, database and conformance suites) without the replica and the fault suite; needs PostgreSQL and RabbitMQ, starts the S3 store, edits no server configuration.")
				_fmt.Println()
				
				_fmt.Print("Usage:\n\n\tmage test:scratch\n\n")
				var aliases []string
				
				
				
				
				
				if len(aliases) > 0 {
					_sort.Strings(aliases)
					_fmt.Printf("Aliases: %s\n\n", _strings.Join(aliases, ", "))
				}
				return
				case "test:service":
				_fmt.Println("Service runs one service module's go test ./... (for example: go tool mage test:service rules); needs PostgreSQL and RabbitMQ, starts the S3 store.")
				_fmt.Println()
				
				_fmt.Print("Usage:\n\n\tmage test:service <name>\n\n")
				var aliases []string
				
				
				
				
				
				if len(aliases) > 0 {
					_sort.Strings(aliases)
					_fmt.Printf("Aliases: %s\n\n", _strings.Join(aliases, ", "))
				}
				return
				case "test:unit":
				_fmt.Println("Unit runs go test -short in every workspace module: what needs no server (database, broker and store tests skip themselves).")
				_fmt.Println()
				
				_fmt.Print("Usage:\n\n\tmage test:unit\n\n")
				var aliases []string
				
				
				
				
				
				if len(aliases) > 0 {
					_sort.Strings(aliases)
					_fmt.Printf("Aliases: %s\n\n", _strings.Join(aliases, ", "))
				}
				return
				default:
				logger.Printf("Unknown target: %q\n", args.Args[0])
				_os.Exit(2)
		}
	}
	if len(args.Args) < 1 {
		if err := list(); err != nil {
			logger.Println("Error:", err)
			_os.Exit(1)
		}
		return
	}
	for x := 0; x < len(args.Args); {
		target := args.Args[x]
		x++

		// resolve aliases
		switch _strings.ToLower(target) {
		
			case "bench":
				target = "Bench:Run"
			case "migrate:new":
				target = "Migrations:New"
			case "migrate:status":
				target = "Migrations:Status"
			case "migrate:up":
				target = "Migrations:Up"
			case "test":
				target = "Test:All"
		}

		switch _strings.ToLower(target) {
		
		
		
			
				case "bench:run":
					expected := x + 0
					if expected > len(args.Args) {
						// note that expected and args at this point include the arg for the target itself
						// so we subtract 1 here to show the number of args without the target.
						logger.Printf("not enough arguments for target \"Bench:Run\", expected %v, got %v\n", expected-1, len(args.Args)-1)
						_os.Exit(2)
					}
					if args.Verbose {
						logger.Println("Running target:", "Bench:Run")
					}
					
				wrapFn := func(ctx _context.Context) error {
					return bench_mageimport.Bench{}.Run(ctx)
				}
				ret := runTarget(logger, wrapFn)
					handleError(logger, ret)
				case "bench:smoke":
					expected := x + 0
					if expected > len(args.Args) {
						// note that expected and args at this point include the arg for the target itself
						// so we subtract 1 here to show the number of args without the target.
						logger.Printf("not enough arguments for target \"Bench:Smoke\", expected %v, got %v\n", expected-1, len(args.Args)-1)
						_os.Exit(2)
					}
					if args.Verbose {
						logger.Println("Running target:", "Bench:Smoke")
					}
					
				wrapFn := func(ctx _context.Context) error {
					return bench_mageimport.Bench{}.Smoke(ctx)
				}
				ret := runTarget(logger, wrapFn)
					handleError(logger, ret)
		
			
				case "build":
					expected := x + 0
					if expected > len(args.Args) {
						// note that expected and args at this point include the arg for the target itself
						// so we subtract 1 here to show the number of args without the target.
						logger.Printf("not enough arguments for target \"Build\", expected %v, got %v\n", expected-1, len(args.Args)-1)
						_os.Exit(2)
					}
					if args.Verbose {
						logger.Println("Running target:", "Build")
					}
					
				wrapFn := func(ctx _context.Context) error {
					return binaries_mageimport.Build()
				}
				ret := runTarget(logger, wrapFn)
					handleError(logger, ret)
		
			
				case "gen:verify":
					expected := x + 0
					if expected > len(args.Args) {
						// note that expected and args at this point include the arg for the target itself
						// so we subtract 1 here to show the number of args without the target.
						logger.Printf("not enough arguments for target \"Gen:Verify\", expected %v, got %v\n", expected-1, len(args.Args)-1)
						_os.Exit(2)
					}
					if args.Verbose {
						logger.Println("Running target:", "Gen:Verify")
					}
					
				wrapFn := func(ctx _context.Context) error {
					return codegen_mageimport.Gen{}.Verify()
				}
				ret := runTarget(logger, wrapFn)
					handleError(logger, ret)
				case "docs":
					expected := x + 0
					if expected > len(args.Args) {
						// note that expected and args at this point include the arg for the target itself
						// so we subtract 1 here to show the number of args without the target.
						logger.Printf("not enough arguments for target \"Docs\", expected %v, got %v\n", expected-1, len(args.Args)-1)
						_os.Exit(2)
					}
					if args.Verbose {
						logger.Println("Running target:", "Docs")
					}
					
				wrapFn := func(ctx _context.Context) error {
					return codegen_mageimport.Docs()
				}
				ret := runTarget(logger, wrapFn)
					handleError(logger, ret)
				case "generate":
					expected := x + 0
					if expected > len(args.Args) {
						// note that expected and args at this point include the arg for the target itself
						// so we subtract 1 here to show the number of args without the target.
						logger.Printf("not enough arguments for target \"Generate\", expected %v, got %v\n", expected-1, len(args.Args)-1)
						_os.Exit(2)
					}
					if args.Verbose {
						logger.Println("Running target:", "Generate")
					}
					
				wrapFn := func(ctx _context.Context) error {
					return codegen_mageimport.Generate()
				}
				ret := runTarget(logger, wrapFn)
					handleError(logger, ret)
		
			
				case "demo":
					expected := x + 0
					if expected > len(args.Args) {
						// note that expected and args at this point include the arg for the target itself
						// so we subtract 1 here to show the number of args without the target.
						logger.Printf("not enough arguments for target \"Demo\", expected %v, got %v\n", expected-1, len(args.Args)-1)
						_os.Exit(2)
					}
					if args.Verbose {
						logger.Println("Running target:", "Demo")
					}
					
				wrapFn := func(ctx _context.Context) error {
					return demo_mageimport.Demo(ctx)
				}
				ret := runTarget(logger, wrapFn)
					handleError(logger, ret)
				case "demoup":
					expected := x + 0
					if expected > len(args.Args) {
						// note that expected and args at this point include the arg for the target itself
						// so we subtract 1 here to show the number of args without the target.
						logger.Printf("not enough arguments for target \"DemoUp\", expected %v, got %v\n", expected-1, len(args.Args)-1)
						_os.Exit(2)
					}
					if args.Verbose {
						logger.Println("Running target:", "DemoUp")
					}
					
				wrapFn := func(ctx _context.Context) error {
					return demo_mageimport.DemoUp(ctx)
				}
				ret := runTarget(logger, wrapFn)
					handleError(logger, ret)
		
			
				case "lint":
					expected := x + 0
					if expected > len(args.Args) {
						// note that expected and args at this point include the arg for the target itself
						// so we subtract 1 here to show the number of args without the target.
						logger.Printf("not enough arguments for target \"Lint\", expected %v, got %v\n", expected-1, len(args.Args)-1)
						_os.Exit(2)
					}
					if args.Verbose {
						logger.Println("Running target:", "Lint")
					}
					
				wrapFn := func(ctx _context.Context) error {
					return lint_mageimport.Lint()
				}
				ret := runTarget(logger, wrapFn)
					handleError(logger, ret)
		
			
				case "migrations:new":
					expected := x + 2
					if expected > len(args.Args) {
						// note that expected and args at this point include the arg for the target itself
						// so we subtract 1 here to show the number of args without the target.
						logger.Printf("not enough arguments for target \"Migrations:New\", expected %v, got %v\n", expected-1, len(args.Args)-1)
						_os.Exit(2)
					}
					if args.Verbose {
						logger.Println("Running target:", "Migrations:New")
					}
					
			arg0 := args.Args[x]
			x++
			arg1 := args.Args[x]
			x++
				wrapFn := func(ctx _context.Context) error {
					return migrate_mageimport.Migrations{}.New(arg0, arg1)
				}
				ret := runTarget(logger, wrapFn)
					handleError(logger, ret)
				case "migrations:status":
					expected := x + 0
					if expected > len(args.Args) {
						// note that expected and args at this point include the arg for the target itself
						// so we subtract 1 here to show the number of args without the target.
						logger.Printf("not enough arguments for target \"Migrations:Status\", expected %v, got %v\n", expected-1, len(args.Args)-1)
						_os.Exit(2)
					}
					if args.Verbose {
						logger.Println("Running target:", "Migrations:Status")
					}
					
				wrapFn := func(ctx _context.Context) error {
					return migrate_mageimport.Migrations{}.Status(ctx)
				}
				ret := runTarget(logger, wrapFn)
					handleError(logger, ret)
				case "migrations:up":
					expected := x + 0
					if expected > len(args.Args) {
						// note that expected and args at this point include the arg for the target itself
						// so we subtract 1 here to show the number of args without the target.
						logger.Printf("not enough arguments for target \"Migrations:Up\", expected %v, got %v\n", expected-1, len(args.Args)-1)
						_os.Exit(2)
					}
					if args.Verbose {
						logger.Println("Running target:", "Migrations:Up")
					}
					
				wrapFn := func(ctx _context.Context) error {
					return migrate_mageimport.Migrations{}.Up(ctx)
				}
				ret := runTarget(logger, wrapFn)
					handleError(logger, ret)
				case "migrate":
					expected := x + 0
					if expected > len(args.Args) {
						// note that expected and args at this point include the arg for the target itself
						// so we subtract 1 here to show the number of args without the target.
						logger.Printf("not enough arguments for target \"Migrate\", expected %v, got %v\n", expected-1, len(args.Args)-1)
						_os.Exit(2)
					}
					if args.Verbose {
						logger.Println("Running target:", "Migrate")
					}
					
				wrapFn := func(ctx _context.Context) error {
					return migrate_mageimport.Migrate(ctx)
				}
				ret := runTarget(logger, wrapFn)
					handleError(logger, ret)
		
			
				case "partition:outbox":
					expected := x + 0
					if expected > len(args.Args) {
						// note that expected and args at this point include the arg for the target itself
						// so we subtract 1 here to show the number of args without the target.
						logger.Printf("not enough arguments for target \"Partition:Outbox\", expected %v, got %v\n", expected-1, len(args.Args)-1)
						_os.Exit(2)
					}
					if args.Verbose {
						logger.Println("Running target:", "Partition:Outbox")
					}
					
				wrapFn := func(ctx _context.Context) error {
					return partition_mageimport.Partition{}.Outbox(ctx)
				}
				ret := runTarget(logger, wrapFn)
					handleError(logger, ret)
		
			
				case "replica:down":
					expected := x + 0
					if expected > len(args.Args) {
						// note that expected and args at this point include the arg for the target itself
						// so we subtract 1 here to show the number of args without the target.
						logger.Printf("not enough arguments for target \"Replica:Down\", expected %v, got %v\n", expected-1, len(args.Args)-1)
						_os.Exit(2)
					}
					if args.Verbose {
						logger.Println("Running target:", "Replica:Down")
					}
					
				wrapFn := func(ctx _context.Context) error {
					return replica_mageimport.Replica{}.Down(ctx)
				}
				ret := runTarget(logger, wrapFn)
					handleError(logger, ret)
				case "replica:up":
					expected := x + 0
					if expected > len(args.Args) {
						// note that expected and args at this point include the arg for the target itself
						// so we subtract 1 here to show the number of args without the target.
						logger.Printf("not enough arguments for target \"Replica:Up\", expected %v, got %v\n", expected-1, len(args.Args)-1)
						_os.Exit(2)
					}
					if args.Verbose {
						logger.Println("Running target:", "Replica:Up")
					}
					
				wrapFn := func(ctx _context.Context) error {
					return replica_mageimport.Replica{}.Up(ctx)
				}
				ret := runTarget(logger, wrapFn)
					handleError(logger, ret)
		
			
				case "store:down":
					expected := x + 0
					if expected > len(args.Args) {
						// note that expected and args at this point include the arg for the target itself
						// so we subtract 1 here to show the number of args without the target.
						logger.Printf("not enough arguments for target \"Store:Down\", expected %v, got %v\n", expected-1, len(args.Args)-1)
						_os.Exit(2)
					}
					if args.Verbose {
						logger.Println("Running target:", "Store:Down")
					}
					
				wrapFn := func(ctx _context.Context) error {
					return store_mageimport.Store{}.Down()
				}
				ret := runTarget(logger, wrapFn)
					handleError(logger, ret)
				case "store:up":
					expected := x + 0
					if expected > len(args.Args) {
						// note that expected and args at this point include the arg for the target itself
						// so we subtract 1 here to show the number of args without the target.
						logger.Printf("not enough arguments for target \"Store:Up\", expected %v, got %v\n", expected-1, len(args.Args)-1)
						_os.Exit(2)
					}
					if args.Verbose {
						logger.Println("Running target:", "Store:Up")
					}
					
				wrapFn := func(ctx _context.Context) error {
					return store_mageimport.Store{}.Up(ctx)
				}
				ret := runTarget(logger, wrapFn)
					handleError(logger, ret)
		
			
				case "test:addtable":
					expected := x + 0
					if expected > len(args.Args) {
						// note that expected and args at this point include the arg for the target itself
						// so we subtract 1 here to show the number of args without the target.
						logger.Printf("not enough arguments for target \"Test:AddTable\", expected %v, got %v\n", expected-1, len(args.Args)-1)
						_os.Exit(2)
					}
					if args.Verbose {
						logger.Println("Running target:", "Test:AddTable")
					}
					
				wrapFn := func(ctx _context.Context) error {
					return tests_mageimport.Test{}.AddTable(ctx)
				}
				ret := runTarget(logger, wrapFn)
					handleError(logger, ret)
				case "test:all":
					expected := x + 0
					if expected > len(args.Args) {
						// note that expected and args at this point include the arg for the target itself
						// so we subtract 1 here to show the number of args without the target.
						logger.Printf("not enough arguments for target \"Test:All\", expected %v, got %v\n", expected-1, len(args.Args)-1)
						_os.Exit(2)
					}
					if args.Verbose {
						logger.Println("Running target:", "Test:All")
					}
					
				wrapFn := func(ctx _context.Context) error {
					return tests_mageimport.Test{}.All(ctx)
				}
				ret := runTarget(logger, wrapFn)
					handleError(logger, ret)
				case "test:clean":
					expected := x + 0
					if expected > len(args.Args) {
						// note that expected and args at this point include the arg for the target itself
						// so we subtract 1 here to show the number of args without the target.
						logger.Printf("not enough arguments for target \"Test:Clean\", expected %v, got %v\n", expected-1, len(args.Args)-1)
						_os.Exit(2)
					}
					if args.Verbose {
						logger.Println("Running target:", "Test:Clean")
					}
					
				wrapFn := func(ctx _context.Context) error {
					return tests_mageimport.Test{}.Clean(ctx)
				}
				ret := runTarget(logger, wrapFn)
					handleError(logger, ret)
				case "test:conformance":
					expected := x + 0
					if expected > len(args.Args) {
						// note that expected and args at this point include the arg for the target itself
						// so we subtract 1 here to show the number of args without the target.
						logger.Printf("not enough arguments for target \"Test:Conformance\", expected %v, got %v\n", expected-1, len(args.Args)-1)
						_os.Exit(2)
					}
					if args.Verbose {
						logger.Println("Running target:", "Test:Conformance")
					}
					
				wrapFn := func(ctx _context.Context) error {
					return tests_mageimport.Test{}.Conformance(ctx)
				}
				ret := runTarget(logger, wrapFn)
					handleError(logger, ret)
				case "test:faults":
					expected := x + 0
					if expected > len(args.Args) {
						// note that expected and args at this point include the arg for the target itself
						// so we subtract 1 here to show the number of args without the target.
						logger.Printf("not enough arguments for target \"Test:Faults\", expected %v, got %v\n", expected-1, len(args.Args)-1)
						_os.Exit(2)
					}
					if args.Verbose {
						logger.Println("Running target:", "Test:Faults")
					}
					
				wrapFn := func(ctx _context.Context) error {
					return tests_mageimport.Test{}.Faults(ctx)
				}
				ret := runTarget(logger, wrapFn)
					handleError(logger, ret)
				case "test:scratch":
					expected := x + 0
					if expected > len(args.Args) {
						// note that expected and args at this point include the arg for the target itself
						// so we subtract 1 here to show the number of args without the target.
						logger.Printf("not enough arguments for target \"Test:Scratch\", expected %v, got %v\n", expected-1, len(args.Args)-1)
						_os.Exit(2)
					}
					if args.Verbose {
						logger.Println("Running target:", "Test:Scratch")
					}
					
				wrapFn := func(ctx _context.Context) error {
					return tests_mageimport.Test{}.Scratch(ctx)
				}
				ret := runTarget(logger, wrapFn)
					handleError(logger, ret)
				case "test:service":
					expected := x + 1
					if expected > len(args.Args) {
						// note that expected and args at this point include the arg for the target itself
						// so we subtract 1 here to show the number of args without the target.
						logger.Printf("not enough arguments for target \"Test:Service\", expected %v, got %v\n", expected-1, len(args.Args)-1)
						_os.Exit(2)
					}
					if args.Verbose {
						logger.Println("Running target:", "Test:Service")
					}
					
			arg0 := args.Args[x]
			x++
				wrapFn := func(ctx _context.Context) error {
					return tests_mageimport.Test{}.Service(ctx, arg0)
				}
				ret := runTarget(logger, wrapFn)
					handleError(logger, ret)
				case "test:unit":
					expected := x + 0
					if expected > len(args.Args) {
						// note that expected and args at this point include the arg for the target itself
						// so we subtract 1 here to show the number of args without the target.
						logger.Printf("not enough arguments for target \"Test:Unit\", expected %v, got %v\n", expected-1, len(args.Args)-1)
						_os.Exit(2)
					}
					if args.Verbose {
						logger.Println("Running target:", "Test:Unit")
					}
					
				wrapFn := func(ctx _context.Context) error {
					return tests_mageimport.Test{}.Unit(ctx)
				}
				ret := runTarget(logger, wrapFn)
					handleError(logger, ret)
		default:
			logger.Printf("Unknown target specified: %q\n", target)
			_os.Exit(2)
		}
	}
}




