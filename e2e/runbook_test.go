package e2e

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// runbookStep is one command of docs/runbook.md: a shell command of a
// ```sh block (its continuation lines joined) with the exit code and the
// output lines it shows, or one statement of a ```sql block.
type runbookStep struct {
	section string // the heading it is under
	lang    string // "sh" or "sql"
	line    int    // its first line in the file
	command string
	exit    int // what the command must exit with (`# exit N`; 0 otherwise)
	// output are the `# …` lines under the command: each must match a line
	// of what it prints (… is anything, <x> one word: a value bound
	// before, or bound here).
	output []string
	// exports are the variables an `export` line sets: the operator's
	// environment, which the test takes from the demo instead.
	exports []string
}

// runbook is docs/runbook.md read for its test.
type runbook struct {
	steps []runbookStep
	// prose are the inline code spans outside the blocks that name a
	// command (craigctl or a service binary), with their line.
	prose map[string]int
}

var (
	fenceOpen   = regexp.MustCompile("^\\s*```([a-z]*)\\s*$")
	fenceClose  = regexp.MustCompile("^\\s*```\\s*$")
	exitComment = regexp.MustCompile(`\s+#\s+exit\s+(\d+)\s*$`)
	tailComment = regexp.MustCompile(`\s+#\s.*$`)
	codeSpan    = regexp.MustCompile("`([^`]+)`")
	// proseCommand is a code span that is a command an operator runs: a
	// craigctl or a service binary's subcommand.
	proseCommand = regexp.MustCompile(`^(craigctl|<svc>|rules|security|exchange|financial) [a-z]`)
)

// parseRunbook reads the runbook's commands in order.
func parseRunbook(t *testing.T, path string) runbook {
	t.Helper()
	f, err := os.Open(path) //nolint:gosec // the repository's own file
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	rb := runbook{prose: map[string]int{}}
	var (
		section, lang, pending string
		inBlock                bool
		pendingLine            int
		prose                  []string // prose lines since the last block, for spans across lines
		proseStart             int
	)
	flushProse := func() {
		text := strings.Join(prose, "\n")
		for _, m := range codeSpan.FindAllStringSubmatchIndex(text, -1) {
			span := strings.Join(strings.Fields(text[m[2]:m[3]]), " ")
			if proseCommand.MatchString(span) {
				rb.prose[span] = proseStart + strings.Count(text[:m[0]], "\n")
			}
		}
		prose = prose[:0]
	}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case !inBlock && fenceOpen.MatchString(line):
			flushProse()
			inBlock, lang = true, fenceOpen.FindStringSubmatch(line)[1]
		case inBlock && fenceClose.MatchString(line):
			require.Empty(t, pending, "runbook.md:%d: a continuation line ends the block", pendingLine)
			inBlock = false
		case inBlock:
			rb.blockLine(t, section, lang, n, strings.TrimSpace(line), &pending, &pendingLine)
		default:
			if strings.HasPrefix(line, "#") {
				section = strings.TrimSpace(strings.TrimLeft(line, "#"))
			}
			if len(prose) == 0 {
				proseStart = n
			}
			prose = append(prose, line)
		}
	}
	require.NoError(t, sc.Err())
	flushProse()
	return rb
}

// blockLine takes one line of a ```sh or ```sql block.
func (rb *runbook) blockLine(t *testing.T, section, lang string, n int, line string, pending *string, pendingLine *int) {
	t.Helper()
	switch {
	case line == "":
	case lang == "sql":
		if *pending == "" {
			*pendingLine = n
		}
		*pending = strings.TrimSpace(*pending + " " + line)
		if strings.HasSuffix(line, ";") {
			rb.steps = append(rb.steps, runbookStep{section: section, lang: lang, line: *pendingLine, command: *pending})
			*pending = ""
		}
	case lang != "sh":
		t.Fatalf("runbook.md:%d: a ```%s block: the runbook's blocks are sh or sql, each run by its test", n, lang)
	case strings.HasPrefix(line, "#"):
		require.NotEmpty(t, rb.steps, "runbook.md:%d: output before any command", n)
		last := &rb.steps[len(rb.steps)-1]
		require.Equal(t, "sh", last.lang, "runbook.md:%d: output under a SQL statement", n)
		last.output = append(last.output, strings.TrimSpace(strings.TrimPrefix(line, "#")))
	case strings.HasSuffix(line, `\`):
		if *pending == "" {
			*pendingLine = n
		}
		*pending += strings.TrimSuffix(line, `\`)
	default:
		if *pending == "" {
			*pendingLine = n
		}
		cmd := *pending + line
		*pending = ""
		step := runbookStep{section: section, lang: lang, line: *pendingLine}
		if m := exitComment.FindStringSubmatch(cmd); m != nil {
			code, err := strconv.Atoi(m[1])
			require.NoError(t, err)
			step.exit, cmd = code, cmd[:len(cmd)-len(m[0])]
		}
		step.command = strings.TrimSpace(tailComment.ReplaceAllString(cmd, ""))
		if strings.HasPrefix(step.command, "export ") {
			for _, f := range strings.Fields(strings.TrimPrefix(step.command, "export ")) {
				name, _, _ := strings.Cut(f, "=")
				step.exports = append(step.exports, name)
			}
		}
		rb.steps = append(rb.steps, step)
	}
}

// placeholder is a value of the operator's case in a command or an output
// line: <row_id>, <hold_id>, <from>.
var placeholder = regexp.MustCompile(`<([a-z_]+)>`)

// outputPattern compiles an output line: … matches anything, a bound
// placeholder its value, an unbound one a word it captures.
func outputPattern(line string, bound func(name string) (string, bool)) (*regexp.Regexp, []string) {
	var b strings.Builder
	var captures []string
	rest := line
	for rest != "" {
		loc := placeholder.FindStringSubmatchIndex(rest)
		ell := strings.Index(rest, "…")
		switch {
		case loc == nil && ell < 0:
			b.WriteString(regexp.QuoteMeta(rest))
			rest = ""
		case ell >= 0 && (loc == nil || ell < loc[0]):
			b.WriteString(regexp.QuoteMeta(rest[:ell]) + ".*")
			rest = rest[ell+len("…"):]
		default:
			b.WriteString(regexp.QuoteMeta(rest[:loc[0]]))
			name := rest[loc[2]:loc[3]]
			if v, ok := bound(name); ok {
				b.WriteString(regexp.QuoteMeta(v))
			} else {
				b.WriteString(`([^\s:,()\[\]]+)`)
				captures = append(captures, name)
			}
			rest = rest[loc[1]:]
		}
	}
	return regexp.MustCompile(b.String()), captures
}

// TestRunbookParse pins how the runbook's blocks read: commands, their
// continuations, exit codes, output lines, exports and SQL statements; and
// how an output line matches.
func TestRunbookParse(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/rb.md"
	require.NoError(t, os.WriteFile(path, []byte("# Title\n\nRun `craigctl archive verify\n--service rules` daily.\n\n## A\n\n"+
		"```sh\nexport A=1 B=2   # yours\ncraigctl x --service rules \\\n  --id <row_id>  # exit 4\n# refused: … <hold_id> now\n```\n\n"+
		"### B\n\n```sql\nSELECT 1\n  FROM t;\nVACUUM <table>;\n```\n"), 0o600))
	rb := parseRunbook(t, path)
	require.Equal(t, map[string]int{"craigctl archive verify --service rules": 3}, rb.prose)
	require.Len(t, rb.steps, 4)
	require.Equal(t, []string{"A", "B"}, rb.steps[0].exports)
	require.Equal(t, runbookStep{section: "A", lang: "sh", line: 10, command: "craigctl x --service rules --id <row_id>", exit: 4,
		output: []string{"refused: … <hold_id> now"}}, rb.steps[1])
	require.Equal(t, runbookStep{section: "B", lang: "sql", line: 18, command: "SELECT 1 FROM t;"}, rb.steps[2])
	require.Equal(t, "VACUUM <table>;", rb.steps[3].command)

	re, captures := outputPattern(rb.steps[1].output[0], func(name string) (string, bool) { return "", false })
	require.Equal(t, []string{"hold_id"}, captures)
	m := re.FindStringSubmatch("craigctl: refused: nothing (x) 01a2-ff now")
	require.Equal(t, "01a2-ff", m[1])
	re, _ = outputPattern("from archive <archive_id> (verified)", func(string) (string, bool) { return "a.b", true })
	require.True(t, re.MatchString("x from archive a.b (verified)"))
	require.False(t, re.MatchString("x from archive aXb (verified)"), "a bound value is literal")
	require.Equal(t, fmt.Sprint([]string(nil)), fmt.Sprint(rb.steps[2].output))
}
